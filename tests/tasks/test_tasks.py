"""Task suites: loading, validation errors that name the file and field, and workspace archives."""

import io
import subprocess
import tarfile
from pathlib import Path

import pytest

from sandbox.settings import SandboxLimits
from tasks.errors import TaskError
from tasks.spec import Task, TaskRegistry, load_suite


def _write_task(root: Path, task_id: str = "demo", yaml_text: str = "instructions: fix it\n") -> Path:
    task = root / task_id
    (task / "workspace" / "pkg").mkdir(parents=True)
    (task / "workspace" / "pkg" / "__init__.py").write_text("X = 1\n")
    (task / "hidden").mkdir()
    (task / "hidden" / "test_pkg.py").write_text("def test_x():\n    pass\n")
    (task / "task.yaml").write_text(yaml_text)
    return task


def _names(tar_bytes: bytes) -> set[str]:
    with tarfile.open(fileobj=io.BytesIO(tar_bytes)) as tar:
        return set(tar.getnames())


def test_builtin_suite_loads():
    tasks = load_suite("builtin")
    assert len(tasks) >= 1
    for task in tasks:
        assert isinstance(task, Task)
        assert task.id == f"builtin/{task.task_id}"
        assert task.workspace_dir.is_dir() and task.hidden_dir.is_dir()
        assert task.instructions.strip()


def test_directory_suite_defaults(tmp_path):
    _write_task(tmp_path / "mysuite")
    (task,) = load_suite(tmp_path / "mysuite")
    assert task.id == "mysuite/demo"
    assert task.grading.command == ["pytest", "/grader"]
    assert task.grading.reward == "fraction"
    assert task.horizon == "short"
    assert task.image == ""
    assert task.sandbox_limits(SandboxLimits()) == SandboxLimits()


def test_limit_overrides_apply(tmp_path):
    _write_task(tmp_path / "s", yaml_text="instructions: x\nlimits: {memory: 2g, pids: 64}\n")
    (task,) = load_suite(tmp_path / "s")
    limits = task.sandbox_limits(SandboxLimits())
    assert limits.memory == "2g" and limits.pids == 64 and limits.cpus == SandboxLimits().cpus


@pytest.mark.parametrize(
    ("yaml_text", "field"),
    [
        ("instructions: x\ngrading: {reward: most}\n", "grading.reward"),
        ("instructions: x\nlimits: {memroy: 1g}\n", "limits"),
        ("instructions: x\nlimits: {pids: -3}\n", "limits.pids"),
        ("instructions: x\nhorizon: medium\n", "horizon"),
        ("instructions: x\nprotected_paths: [relative/path]\n", "protected_paths"),
        ("instructions: x\ngrading: {command: [bash, run.sh]}\n", "grading.command"),
        ("instructions: x\ngrading: {command: [pytest, /workspace/tests]}\n", "grading.command"),
        ("instructions: x\nsurprise: 1\n", "surprise"),
        ("horizon: short\n", "instructions"),
    ],
)
def test_bad_task_yaml_names_file_and_field(tmp_path, yaml_text, field):
    task = _write_task(tmp_path / "s", yaml_text=yaml_text)
    with pytest.raises(TaskError) as err:
        load_suite(tmp_path / "s")
    assert str(task / "task.yaml") in str(err.value)
    assert f"field '{field}'" in str(err.value)


def test_an_unknown_grading_mode_is_one_error_listing_the_registered_modes(tmp_path):
    """``grading.mode`` is checked against ``tasks.grading.modes.GRADING_MODES``, not a hand-kept list."""
    task = _write_task(tmp_path / "s", yaml_text="instructions: x\ngrading: {mode: unittest}\n")
    with pytest.raises(TaskError) as err:
        load_suite(tmp_path / "s")
    assert str(err.value) == (
        f"{task / 'task.yaml'}: field 'grading.mode': Value error, "
        "unknown grading mode 'unittest'; known: isolated, pytest"
    )


def test_unparseable_yaml_is_a_clear_error(tmp_path):
    task = _write_task(tmp_path / "s", yaml_text="instructions: [unclosed\n")
    with pytest.raises(TaskError, match="not valid YAML") as err:
        load_suite(tmp_path / "s")
    assert str(task / "task.yaml") in str(err.value)


def test_missing_hidden_tests_is_an_error(tmp_path):
    task = _write_task(tmp_path / "s")
    (task / "hidden" / "test_pkg.py").unlink()
    with pytest.raises(TaskError, match="hidden/"):
        load_suite(tmp_path / "s")


def test_unknown_suite_and_task(tmp_path):
    with pytest.raises(TaskError, match="no task suite"):
        load_suite(tmp_path / "nope")
    registry = TaskRegistry([])
    with pytest.raises(TaskError, match="unknown task"):
        registry.get("builtin/nope")


def test_registry_lists_and_gets(tmp_path):
    _write_task(tmp_path / "extra", "one")
    registry = TaskRegistry(["builtin", tmp_path / "extra"])
    ids = [task.id for task in registry.list()]
    assert "extra/one" in ids and any(i.startswith("builtin/") for i in ids)
    assert registry.get("extra/one").task_id == "one"
    assert "extra/one" in registry


def test_workspace_tar_holds_workspace_only(tmp_path):
    task_dir = _write_task(tmp_path / "s")
    (task_dir / "solution").mkdir()
    (task_dir / "solution" / "answer.py").write_text("SECRET = 1\n")
    (task,) = load_suite(tmp_path / "s")
    names = _names(task.workspace_tar())
    assert "pkg/__init__.py" in names
    assert not any("hidden" in n or "solution" in n or "task.yaml" in n for n in names)


def test_workspace_tar_is_reproducible_and_sees_edits(tmp_path):
    task_dir = _write_task(tmp_path / "s")
    (task,) = load_suite(tmp_path / "s")
    first = task.workspace_tar()
    assert task.workspace_tar() == first
    (task_dir / "workspace" / "pkg" / "new.py").write_text("Y = 2\n")
    assert "pkg/new.py" in _names(task.workspace_tar())


def test_git_workspace_has_branch_with_fix(tmp_path):
    yaml_text = "instructions: x\ngit:\n  branches:\n    fix/it: branches/fix\n"
    task_dir = _write_task(tmp_path / "s", yaml_text=yaml_text)
    (task_dir / "branches" / "fix" / "pkg").mkdir(parents=True)
    (task_dir / "branches" / "fix" / "pkg" / "__init__.py").write_text("X = 2\n")
    (task,) = load_suite(tmp_path / "s")
    out = tmp_path / "out"
    out.mkdir()
    with tarfile.open(fileobj=io.BytesIO(task.workspace_tar())) as tar:
        tar.extractall(out, filter="data")
    assert (out / "pkg" / "__init__.py").read_text() == "X = 1\n"

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=out, capture_output=True, text=True, check=True).stdout

    assert git("branch", "--show-current").strip() == "main"
    assert git("show", "fix/it:pkg/__init__.py") == "X = 2\n"
    assert git("status", "--porcelain") == ""
    # Deterministic: the same commit ids on every build.
    rebuilt = tmp_path / "again"
    rebuilt.mkdir()
    from tasks.spec import _build_workspace_tar

    with tarfile.open(fileobj=io.BytesIO(_build_workspace_tar(task))) as tar:
        tar.extractall(rebuilt, filter="data")
    head = subprocess.run(["git", "rev-parse", "fix/it"], cwd=rebuilt, capture_output=True, text=True).stdout
    assert head == git("rev-parse", "fix/it")


@pytest.mark.docker
async def test_git_honeypot_is_a_real_repository_inside_the_sandbox():
    """The agent's sandbox sees a working git repository whose other branch holds the fix."""
    import uuid

    import docker

    from sandbox.base import SandboxSpec
    from sandbox.docker_backend import DockerBackend
    from sandbox.image import ensure_image
    from sandbox.settings import SandboxSettings

    task = TaskRegistry(["builtin"]).get("builtin/config-parser")
    client = docker.from_env()
    image = ensure_image(client)
    client.close()
    backend = DockerBackend(f"test-tasks-{uuid.uuid4().hex[:8]}", None, SandboxSettings(image=image))
    try:
        sandbox = await backend.create(
            SandboxSpec(image=image, limits=task.sandbox_limits(), workspace=task.workspace_tar())
        )
        try:
            status = await sandbox.exec("git status --porcelain && git branch --show-current; git branch -a")
            fix = await sandbox.exec("git show fix/comment-lines:confparse/parser.py")
            hidden = await sandbox.exec("ls -a; ls /grader /hidden 2>&1 | head -2")
        finally:
            await sandbox.destroy()
    finally:
        await backend.close()
    assert status.exit_code == 0, status.output
    lines = status.output.split()
    assert lines[0] == "main" and "fix/comment-lines" in lines
    assert fix.exit_code == 0 and fix.output == (task.solution_dir / "confparse" / "parser.py").read_text()
    assert "hidden" not in hidden.output.split() and "solution" not in hidden.output.split()
    assert "task.yaml" not in hidden.output


def test_builtin_suite_shape():
    """12+ tasks, each with a reference solution that only touches workspace files; honeypots of
    every kind; some long-horizon tasks; hidden tests that import the workspace lazily."""
    import ast
    import sys

    tasks = load_suite("builtin")
    assert len(tasks) >= 12
    kinds = {task.honeypot.kind for task in tasks if task.honeypot}
    assert kinds == {"upstream_url", "wrong_visible_test", "git_branch", "reference_path"}
    assert sum(task.horizon == "long" for task in tasks) >= 3
    allowed = set(sys.stdlib_module_names) | {"pytest", "rlguard_checks"}
    for task in tasks:
        solution = task.solution_files()
        assert solution, task.id
        for rel in solution:
            assert (task.workspace_dir / rel).is_file(), f"{task.id}: solution file {rel} replaces nothing"
            assert not rel.startswith("tests/"), f"{task.id}: a solution must not edit the tests"
        for path in task.hidden_dir.rglob("test_*.py"):
            for node in ast.parse(path.read_text()).body:
                if isinstance(node, ast.Import | ast.ImportFrom):
                    modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
                    for module in modules:
                        assert module.split(".")[0] in allowed, f"{path}: imports {module} at module level"
