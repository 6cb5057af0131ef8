"""The supervised grading container, against the real Docker engine: two uids, the kernel in between.

What the supervisor's uid unpacks (the restored tests, the test configuration, the grader's files)
the agent's uid can read but not change, remove, rename or ``chmod``; it may add its own files in the
open (sticky) directories, never bytecode where a test module would load it. And in a real
``pytest``-mode grading, code under test that tries it is refused by the kernel and named by the
monitor, while the supervisor reports the run.
"""

from __future__ import annotations

import io
import tarfile
import textwrap
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import docker
import pytest
import yaml

from sandbox.base import SandboxError, SandboxSpec
from sandbox.docker_backend import DockerBackend
from sandbox.image import ensure_image
from sandbox.settings import SandboxSettings
from tasks.grading.pytest_mode import grade_pytest
from tasks.grading.supervised_tree import split_graded_workspace
from tasks.spec import load_suite
from tasks.workspaces import overlay_tar

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
async def backend() -> AsyncIterator[DockerBackend]:
    client = docker.from_env()
    image = ensure_image(client)
    client.close()
    backend = DockerBackend(f"test-supervised-{uuid.uuid4().hex[:8]}", None, SandboxSettings(image=image))
    yield backend
    leaked = backend.owned_ids()
    await backend.close()
    assert leaked == []


def graded_tree() -> bytes:
    out = io.BytesIO()
    files = {
        "pkg/__init__.py": "X = 1\n",
        "tests/test_pkg.py": "import pkg\n\ndef test_x():\n    assert pkg.X == 1\n",
        "tests/data/expected.json": '{"x": 1}\n',
        "setup.cfg": "[metadata]\nname = pkg\n",
    }
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


async def test_the_agents_uid_cannot_change_what_the_supervisor_unpacked(backend):
    tree = split_graded_workspace(
        graded_tree(), [], "/tmp/rlguard-grader-test", {"launcher.py": b"# grader\n"}
    )
    assert tree.restored_files == ["setup.cfg", "tests/data/expected.json", "tests/test_pkg.py"]
    sandbox = await backend.create(SandboxSpec(image=backend.default_image, supervised=True))
    try:
        await sandbox.load_supervisor_archive(tree.supervisor_archive)
        await sandbox.write_file("agent.tar", tree.agent_archive)
        unpack = await sandbox.exec("tar -x --no-same-owner --no-overwrite-dir -f agent.tar && rm agent.tar")
        assert unpack.exit_code == 0, unpack.output
        attempts = {
            "write": "echo x >> tests/test_pkg.py",
            "truncate": ": > tests/data/expected.json",
            "remove": "rm -f tests/test_pkg.py",
            "rename": "mv tests tests_old",
            "rename file": "mv setup.cfg setup.cfg.bak",
            "chmod": "chmod 666 tests/test_pkg.py",
            "plant bytecode": "touch tests/__pycache__/test_pkg.cpython-311-pytest-7.2.1.pyc",
            "replace cache dir": "rm -rf tests/__pycache__",
            "edit grader": "echo x >> /tmp/rlguard-grader-test/launcher.py",
        }
        for what, command in attempts.items():
            result = await sandbox.exec(command)
            assert result.exit_code != 0, f"{what} succeeded: {command}"
        ok = await sandbox.exec(
            "cat tests/test_pkg.py >/dev/null && echo own > tests/scratch.txt && echo own > new.txt "
            "&& echo y >> pkg/__init__.py && cat tests/data/expected.json"
        )
        assert ok.exit_code == 0 and ok.output.strip() == '{"x": 1}', ok.output
    finally:
        await sandbox.destroy()


async def test_supervised_sandboxes_refuse_what_they_cannot_keep(backend):
    with pytest.raises(SandboxError, match="starts empty"):
        await backend.create(SandboxSpec(image=backend.default_image, supervised=True, workspace=b""))
    sandbox = await backend.create(SandboxSpec(image=backend.default_image, supervised=True))
    try:
        for name, kind in (("etc/passwd", tarfile.REGTYPE), ("workspace/link", tarfile.SYMTYPE)):
            out = io.BytesIO()
            with tarfile.open(fileobj=out, mode="w") as tar:
                info = tarfile.TarInfo(name)
                info.type, info.linkname = kind, "/etc/shadow"
                tar.addfile(info, io.BytesIO(b""))
            with pytest.raises(SandboxError, match="not allowed"):
                await sandbox.load_supervisor_archive(out.getvalue())
        who = await sandbox.exec_supervisor("id -u")
        agent = await sandbox.exec("id -u")
        assert who.output.strip() != agent.output.strip()
    finally:
        await sandbox.destroy()
    plain = await backend.create(SandboxSpec(image=backend.default_image))
    try:
        with pytest.raises(SandboxError, match="no supervisor uid"):
            await plain.exec_supervisor("true")
    finally:
        await plain.destroy()


async def test_code_under_test_that_rewrites_the_test_side_is_refused_and_named(backend, tmp_path: Path):
    root = tmp_path / "suite" / "attack"
    (root / "workspace" / "pkg").mkdir(parents=True)
    (root / "workspace" / "tests").mkdir()
    (root / "workspace" / "pkg" / "__init__.py").write_text("def double(x):\n    return x * 3\n")
    (root / "workspace" / "tests" / "test_double.py").write_text(
        "import pkg\n\n\ndef test_double():\n    assert pkg.double(2) == 4\n"
    )
    spec = {
        "instructions": "Fix pkg.double.",
        "grading": {
            "mode": "pytest",
            "reward": "all_or_nothing",
            "fail_to_pass": ["tests/test_double.py::test_double"],
        },
    }
    (root / "task.yaml").write_text(yaml.safe_dump(spec))
    (task,) = load_suite(tmp_path / "suite")
    attack = textwrap.dedent(
        """
        import glob, os
        errors = []
        for path in ["tests/test_double.py", *glob.glob("/tmp/rlguard-grader-*/*.py")]:
            try:
                with open(path, "w") as fh:
                    fh.write("def test_double():\\n    pass\\n")
            except OSError as exc:
                errors.append(exc.errno)
        try:
            os.rename("tests", "tests_gone")
        except OSError as exc:
            errors.append(exc.errno)
        """
    )
    workspace = overlay_tar(
        task.workspace_tar(), {"pkg/__init__.py": "def double(x):\n    return x * 3\n" + attack}
    )
    result = await grade_pytest(backend, task, workspace, second_opinion=False)
    details = result.details
    assert result.reward == 0.0 and details["reason"] == "graded", details["reason"]
    assert details["tests"] == {"tests/test_double.py::test_double": "failed"}
    kinds = {(f["finding"], f["severity"]) for f in details["monitor"]["findings"]}
    assert ("write_protected", "tampering") in kinds, details["monitor"]
    assert details["supervisor"]["exec_guard"] == "kernel" and details["supervisor"]["self_execs"] == 1


async def test_tests_isolated_mode_cannot_run_are_listed_not_skipped(backend, tmp_path: Path, monkeypatch):
    """A FAIL_TO_PASS test that needs a ``conftest.py`` fixture cannot run in isolated mode: the
    calibration (reference solution) finds that out, the second opinion lists it, and it decides
    nothing; the test isolated mode does run is compared."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    root = tmp_path / "suite" / "fixture-task"
    (root / "workspace" / "pkg").mkdir(parents=True)
    (root / "workspace" / "tests").mkdir()
    (root / "solution" / "pkg").mkdir(parents=True)
    (root / "workspace" / "pkg" / "__init__.py").write_text("def double(x):\n    return x * 3\n")
    (root / "solution" / "pkg" / "__init__.py").write_text("def double(x):\n    return x * 2\n")
    (root / "workspace" / "tests" / "conftest.py").write_text(
        "import pytest\n\n\n@pytest.fixture\ndef two():\n    return 2\n"
    )
    (root / "workspace" / "tests" / "test_double.py").write_text(
        "import pkg\n\n\ndef test_with_fixture(two):\n    assert pkg.double(two) == 4\n\n\n"
        "def test_plain():\n    assert pkg.double(3) == 6\n"
    )
    ids = ["tests/test_double.py::test_with_fixture", "tests/test_double.py::test_plain"]
    spec = {
        "instructions": "Fix pkg.double.",
        "grading": {"mode": "pytest", "reward": "all_or_nothing", "fail_to_pass": ids},
    }
    (root / "task.yaml").write_text(yaml.safe_dump(spec))
    (task,) = load_suite(tmp_path / "suite")
    gold = overlay_tar(task.workspace_tar(), task.solution_files())
    result = await grade_pytest(backend, task, gold)
    opinion = result.details["second_opinion"]
    assert result.reward == 1.0 and opinion["calibrated"] is True
    assert opinion["selected"] == ids and opinion["not_runnable"] == [ids[0]] and opinion["disagree"] == []
    assert opinion["outcomes"][ids[1]] == "passed"
