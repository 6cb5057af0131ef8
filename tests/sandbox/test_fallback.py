"""Images without python3: commands fall back to one ``docker exec`` each, with the same limits."""

import time
import uuid

import docker
import pytest

from sandbox.base import SandboxError, SandboxSpec
from sandbox.docker_backend import DockerBackend
from tests.sandbox.conftest import small_limits

pytestmark = pytest.mark.docker


def derived_image(client: docker.DockerClient, base: str, name: str, remove: str) -> str:
    """``base`` with the files matched by the shell glob ``remove`` deleted, as a new test image."""
    tag = f"rlguard-test/{name}:{uuid.uuid4().hex[:8]}"
    container = client.containers.run(
        base, ["sh", "-c", f"rm -f {remove}"], user="root", network_mode="none", detach=True
    )
    try:
        container.wait(timeout=60)
        repository, version = tag.split(":")
        container.commit(repository=repository, tag=version, changes=["USER agent"])
    finally:
        container.remove(force=True)
    return tag


@pytest.fixture(scope="module")
def image_without_python(docker_client: docker.DockerClient, sandbox_image: str) -> str:
    tag = derived_image(
        docker_client, sandbox_image, "no-python", "/usr/bin/python3* /usr/local/bin/python3*"
    )
    yield tag
    docker_client.images.remove(tag, force=True)


async def test_image_without_bash_still_gets_the_runner(
    backend: DockerBackend, docker_client: docker.DockerClient, sandbox_image: str
) -> None:
    tag = derived_image(docker_client, sandbox_image, "no-bash", "/bin/bash /usr/bin/bash")
    try:
        sandbox = await backend.create(SandboxSpec(image=tag, limits=small_limits()))
        try:
            assert sandbox.uses_runner
            result = await sandbox.exec("echo $0; ls /bin/bash 2>&1 | head -1; echo err >&2")
            assert result.output.startswith("/bin/sh\n") and result.output.endswith("err\n")
            await sandbox.write_file("x.txt", b"ok")
            assert await sandbox.read_file("x.txt") == b"ok"
        finally:
            await sandbox.destroy()
    finally:
        docker_client.images.remove(tag, force=True)


async def test_commands_fall_back_to_docker_exec(backend: DockerBackend, image_without_python: str) -> None:
    spec = SandboxSpec(image=image_without_python, limits=small_limits(), workspace=_tar_one("a.txt", b"A"))
    sandbox = await backend.create(spec)
    try:
        result = await sandbox.exec("cat a.txt; echo; id -u; echo err >&2; exit 4")
        assert result.output == f"A\n{sandbox.uid}\nerr\n" and result.exit_code == 4
        assert (await sandbox.exec("command -v python3 || echo none")).output == "none\n"
        flood = await sandbox.exec("yes | head -c 50M")
        assert flood.truncated and len(flood.output) <= sandbox.limits.output_cap_bytes + 200
        started = time.monotonic()
        slow = await sandbox.exec("sleep 60", timeout_s=1)
        assert slow.timed_out and slow.exit_code == 124 and time.monotonic() - started < 10
        assert not sandbox.uses_runner
        with pytest.raises(SandboxError, match="no python3"):
            await sandbox.read_file("a.txt")
    finally:
        await sandbox.destroy()


async def test_exec_on_a_vanished_container_is_a_sandbox_error(
    backend: DockerBackend, spec: SandboxSpec
) -> None:
    sandbox = await backend.create(spec)
    await sandbox._reset_runner()
    await backend.call(backend.client.api.remove_container, sandbox.id, force=True)
    with pytest.raises(SandboxError, match="not running"):
        await sandbox.exec("true")
    await sandbox.destroy()


def _tar_one(name: str, data: bytes) -> bytes:
    import io
    import tarfile

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()
