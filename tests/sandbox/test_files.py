"""File operations under /workspace: round trips, path escapes, planted symlinks, archives."""

import io
import tarfile
import time
from pathlib import Path

import pytest

from sandbox.base import PathEscapeError, SandboxError, SandboxSpec
from sandbox.docker_backend import DockerBackend
from sandbox.docker_sandbox import DockerSandbox
from sandbox.paths import workspace_path
from tests.sandbox.conftest import small_limits

pytestmark = pytest.mark.docker


async def test_write_read_list_round_trip(sandbox: DockerSandbox) -> None:
    payload = bytes(range(256)) * 10
    await sandbox.write_file("pkg/sub/data.bin", payload)
    await sandbox.write_file("/workspace/top.txt", b"top\n")
    assert await sandbox.read_file("pkg/sub/data.bin") == payload
    assert await sandbox.read_file("/workspace/pkg/../top.txt") == b"top\n"
    assert await sandbox.read_file("pkg/sub/data.bin", max_bytes=10) == payload[:10]
    names = {(e.name, e.kind) for e in await sandbox.list_dir(".")}
    assert names == {("pkg", "dir"), ("top.txt", "file")}
    (entry,) = await sandbox.list_dir("pkg/sub")
    assert entry.size == len(payload)
    owner = await sandbox.exec("python3 -c 'import os; print(os.stat(\"pkg/sub/data.bin\").st_uid)'")
    assert owner.output.strip() == str(sandbox.uid)


@pytest.mark.parametrize(
    "path", ["../etc/passwd", "/etc/passwd", "a/../../etc", "/workspace/../tmp/x", "", "a\0b"]
)
def test_lexical_escapes_are_refused_on_the_host(path: str) -> None:
    with pytest.raises(PathEscapeError):
        workspace_path(path)


async def test_escapes_are_refused_by_every_operation(shared: DockerSandbox) -> None:
    for call in (
        shared.read_file("../../etc/passwd"),
        shared.write_file("/etc/evil", b"x"),
        shared.list_dir("/"),
    ):
        with pytest.raises(PathEscapeError):
            await call


async def test_planted_symlinks_cannot_redirect_file_operations(sandbox: DockerSandbox) -> None:
    await sandbox.exec("ln -s /etc/passwd leak; ln -s /etc etcdir; ln -s / root; ln -s inside.txt alias")
    await sandbox.write_file("inside.txt", b"fine")
    for call in (
        sandbox.read_file("leak"),
        sandbox.read_file("etcdir/hostname"),
        sandbox.write_file("etcdir/evil", b"x"),
        sandbox.write_file("leak", b"x"),
        sandbox.list_dir("root"),
        sandbox.list_dir("etcdir"),
    ):
        with pytest.raises(PathEscapeError):
            await call
    assert await sandbox.read_file("alias") == b"fine"  # a link that stays inside is followed
    kinds = {e.name: e.kind for e in await sandbox.list_dir(".")}
    assert kinds["leak"] == "symlink" and kinds["inside.txt"] == "file"


async def test_planted_fifo_does_not_hang_a_read(sandbox: DockerSandbox) -> None:
    await sandbox.exec("mkfifo pipe")
    started = time.monotonic()
    with pytest.raises(SandboxError):
        await sandbox.read_file("pipe")
    assert time.monotonic() - started < 5


async def test_missing_file_is_not_found(shared: DockerSandbox) -> None:
    with pytest.raises(FileNotFoundError):
        await shared.read_file("no/such/file")


async def test_workspace_directory_in_and_tar_out(
    backend: DockerBackend, sandbox_image: str, tmp_path: Path
) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "mod.py").write_text("def answer():\n    return 42\n")
    (tmp_path / "run.sh").write_text("#!/bin/sh\necho ran\n")
    (tmp_path / "run.sh").chmod(0o755)
    spec = SandboxSpec(image=sandbox_image, limits=small_limits(), workspace=tmp_path)
    sandbox = await backend.create(spec)
    try:
        result = await sandbox.exec("./run.sh && python3 -c 'from pkg.mod import answer; print(answer())'")
        assert result.output == "ran\n42\n"
        await sandbox.exec("echo new > made_inside.txt")
        with tarfile.open(fileobj=io.BytesIO(await sandbox.export_workspace())) as archive:
            names = {name.lstrip("./") for name in archive.getnames()}
            assert {"pkg/mod.py", "run.sh", "made_inside.txt"} <= names
            member = archive.extractfile("./made_inside.txt")
            assert member is not None and member.read() == b"new\n"
    finally:
        await sandbox.destroy()


async def test_workspace_from_tar_bytes_and_size_limit(backend: DockerBackend, sandbox_image: str) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        info = tarfile.TarInfo("hello.txt")
        info.size = 5
        archive.addfile(info, io.BytesIO(b"hello"))
    sandbox = await backend.create(
        SandboxSpec(image=sandbox_image, limits=small_limits(), workspace=buffer.getvalue())
    )
    try:
        assert await sandbox.read_file("hello.txt") == b"hello"
    finally:
        await sandbox.destroy()
    too_big = SandboxSpec(
        image=sandbox_image, limits=small_limits(transfer_max_bytes=1024), workspace=b"x" * 4096
    )
    with pytest.raises(SandboxError, match="over the 1024-byte limit"):
        await backend.create(too_big)


async def test_undecodable_file_names_are_listed_readably(shared: DockerSandbox) -> None:
    await shared.exec("mkdir -p odd && touch odd/$'caf\\xe9.txt'")
    (entry,) = await shared.list_dir("odd")
    assert entry.name == "caf\ufffd.txt"
    entry.name.encode("utf-8")  # safe to put in an HTTP answer
