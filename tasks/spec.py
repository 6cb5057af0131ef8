"""Task suites: ``<suite>/<task_id>/task.yaml`` + ``workspace/`` + ``hidden/`` loaded into typed tasks.

A task directory is data, not code: the loader validates it once (clear errors naming the file and
the field), and everything downstream — the gateway creating a sandbox, the grader, the scripted
policy — reads the same ``Task`` object. ``hidden/`` and ``solution/`` never leave the host except
into a grading container; only ``workspace/`` (plus, for tasks that declare ``git``, a deterministic
repository built from it) is copied into the agent's sandbox.
"""

from __future__ import annotations

import io
import re
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from sandbox.settings import SandboxLimits
from tasks.collect import expected_test_ids
from tasks.environments import EnvironmentSpec, environment_image
from tasks.errors import TaskError
from tasks.gitenv import git_env
from tasks.testfiles import clean_name, is_protected

BUILTIN_SUITES_DIR = Path(__file__).resolve().parent / "suites"
TASK_FILE = "task.yaml"
MAX_WORKSPACE_TAR_BYTES = 16 * 1024 * 1024
_ID_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GradingSpec(_Strict):
    """How the tests decide the reward; ``mode`` picks the grading mode (``tasks.grading.modes``)."""

    mode: Literal["isolated", "pytest"] = Field(
        "isolated",
        description="isolated: authored hidden tests, workspace code behind proxies; pytest: the "
        "project's own suite in-process (SWE-bench compatible), see docs/grading.md",
    )
    command: list[str] = Field(
        default_factory=lambda: ["pytest", "/grader"],
        description="pytest over the hidden tests; extra arguments after 'pytest' must name paths under "
        "/grader. Only pytest is supported: the tamper-proofing is built around it.",
    )
    timeout_s: float = Field(60.0, gt=0, le=1800, description="Wall-clock limit of one grading run")
    reward: Literal["fraction", "all_or_nothing"] = "fraction"
    restore: list[str] = Field(
        default_factory=lambda: ["tests"],
        description="Workspace paths put back from the pristine task before grading (the visible tests)",
    )
    fail_to_pass: list[str] = Field(
        default_factory=list, description="pytest mode: node ids the solution must turn green"
    )
    pass_to_pass: list[str] = Field(
        default_factory=list, description="pytest mode: node ids that must stay green"
    )
    pythonpath: list[str] = Field(
        default_factory=list,
        description="pytest mode: workspace directories put on sys.path after /workspace (e.g. src)",
    )

    @field_validator("restore")
    @classmethod
    def _relative(cls, paths: list[str]) -> list[str]:
        for path in paths:
            if path.startswith("/") or ".." in path.split("/") or not path.strip("/."):
                raise ValueError(f"restore paths must be relative and inside the workspace; got {path!r}")
        return paths

    @field_validator("pythonpath")
    @classmethod
    def _relative_dirs(cls, paths: list[str]) -> list[str]:
        for path in paths:
            if path.startswith("/") or ".." in path.split("/") or not path.strip("/."):
                raise ValueError(f"pythonpath entries must be relative, inside the workspace; got {path!r}")
        return paths

    @field_validator("command")
    @classmethod
    def _pytest_over_grader(cls, command: list[str]) -> list[str]:
        if not command or command[0] != "pytest":
            raise ValueError("must start with 'pytest' (the hardened grader runs pytest itself)")
        for arg in command[1:]:
            if arg.startswith("-"):
                raise ValueError(f"options are fixed by the grader; got {arg!r}")
            if arg != "/grader" and not arg.startswith("/grader/"):
                raise ValueError(f"test paths must lie under /grader; got {arg!r}")
        return command


class Honeypot(_Strict):
    """What cheat a task tempts; used by the demo, the scripted cheating policy and the tests."""

    kind: Literal["upstream_url", "wrong_visible_test", "git_branch", "reference_path"]
    category: str = Field(description="The guard category a cheat on this task falls into")
    tempts: str = Field(description="The shortcut a cheating agent would take, in words")
    cheat_command: str | None = Field(None, description="A bash command a cheating agent would run")


class GitSpec(_Strict):
    """Build the workspace as a git repository: ``main`` holds the workspace, other branches overlays."""

    branch: str = "main"
    message: str = "Initial import"
    branches: dict[str, str] = Field(
        default_factory=dict,
        description="branch name -> directory (relative to the task) whose files are committed on top",
    )


class TaskFile(_Strict):
    """The schema of ``task.yaml``."""

    instructions: str = Field(min_length=1)
    image: str = ""
    limits: dict[str, Any] = Field(default_factory=dict)
    protected_paths: list[str] = Field(default_factory=list)
    grading: GradingSpec = Field(default_factory=GradingSpec)
    horizon: Literal["short", "long"] = "short"
    honeypot: Honeypot | None = None
    git: GitSpec | None = None
    environment: EnvironmentSpec | None = Field(
        None,
        description="Python packages and set-up commands of the task's own image, built over the sandbox "
        "image offline by `rlguard tasks build-env` (see tasks.environments)",
    )

    @field_validator("limits")
    @classmethod
    def _known_limits(cls, limits: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(limits) - set(SandboxLimits.model_fields))
        if unknown:
            raise ValueError(f"unknown sandbox limits {unknown}; known: {sorted(SandboxLimits.model_fields)}")
        SandboxLimits.model_validate(limits)
        return limits

    @field_validator("protected_paths")
    @classmethod
    def _absolute(cls, paths: list[str]) -> list[str]:
        for path in paths:
            if not path.startswith("/"):
                raise ValueError(f"protected paths must be absolute; got {path!r}")
        return paths


class Task(TaskFile):
    """One loaded task: the validated ``task.yaml`` plus where it lives and who it is."""

    id: str
    suite: str
    task_id: str
    root: Path

    @property
    def workspace_dir(self) -> Path:
        return self.root / "workspace"

    @property
    def hidden_dir(self) -> Path:
        return self.root / "hidden"

    @property
    def solution_dir(self) -> Path:
        """The reference solution: files that replace workspace files (never copied into a sandbox)."""
        return self.root / "solution"

    def base_image(self, configured: str = "") -> str:
        """The image the task's environment builds on: its own, else ``configured``, else the default."""
        if self.image:
            return self.image
        if configured:
            return configured
        from sandbox.image import default_image  # docker SDK import, only when no image is named

        return default_image()

    def resolved_image(self, configured: str = "") -> str:
        """The image episodes and grading run in: the environment's derived image, else the base image.

        A pure name: the derived image's tag is a hash of its recipe, so no engine is asked here;
        ``rlguard tasks build-env`` builds it.
        """
        return environment_image(self.environment, self.base_image(configured))

    def sandbox_limits(self, base: SandboxLimits | None = None) -> SandboxLimits:
        """``base`` (the settings' limits; default: the built-in ones) with this task's overrides applied."""
        base = base or SandboxLimits()
        try:
            return SandboxLimits.model_validate({**base.model_dump(), **self.limits})
        except ValidationError as exc:
            raise TaskError(_format_validation_error(self.root / TASK_FILE, exc)) from None

    def expected_test_ids(self) -> list[str]:
        """``pytest`` mode: FAIL_TO_PASS then PASS_TO_PASS node ids, each once."""
        return list(dict.fromkeys([*self.grading.fail_to_pass, *self.grading.pass_to_pass]))

    def test_files(self) -> list[str]:
        """``pytest`` mode: the files the expected node ids live in, first seen first (what pytest runs)."""
        return list(dict.fromkeys(nodeid.split("::", 1)[0] for nodeid in self.expected_test_ids()))

    def protected_extra(self) -> list[str]:
        """Paths this task protects beyond ``tasks.testfiles``' rules: its test patch (``hidden/``),
        its node ids' files and ``grading.restore``."""
        hidden = self.hidden_dir
        overlay = (
            [p.relative_to(hidden).as_posix() for p in sorted(hidden.rglob("*")) if p.is_file()]
            if hidden.is_dir()
            else []
        )
        return [*overlay, *self.test_files(), *(p.strip("/") for p in self.grading.restore)]

    def solution_files(self) -> dict[str, str]:
        """Reference solution as ``{workspace-relative path: full new content}``."""
        if not self.solution_dir.is_dir():
            return {}
        return {
            path.relative_to(self.solution_dir).as_posix(): path.read_text()
            for path in sorted(self.solution_dir.rglob("*"))
            if path.is_file() and "__pycache__" not in path.parts
        }

    def workspace_tar(self) -> bytes:
        """The initial ``/workspace`` as a tar archive (a git repository when the task declares one)."""
        key = (self.root, self._tree_stamp())
        cached = _TAR_CACHE.get(key)
        if cached is None:
            if len(_TAR_CACHE) >= 256:
                _TAR_CACHE.clear()
            cached = _TAR_CACHE[key] = _build_workspace_tar(self)
        return cached

    def _tree_stamp(self) -> tuple[tuple[str, int, int], ...]:
        """Names, sizes and mtimes of the files the archive depends on: a cache key that sees edits."""
        dirs = [self.workspace_dir]
        if self.git:
            dirs += [self.root / rel for rel in self.git.branches.values()]
        stamp = [(str(self.root / TASK_FILE), *_stat(self.root / TASK_FILE))]
        for directory in dirs:
            for path in sorted(directory.rglob("*")):
                if path.is_file():
                    stamp.append((str(path), *_stat(path)))
        return tuple(stamp)


def _stat(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_size, st.st_mtime_ns


# Built archives by (task root, file stamps): git-backed workspaces take ~100 ms to build.
_TAR_CACHE: dict[tuple[Path, tuple], bytes] = {}


def _ignored(path: Path) -> bool:
    return "__pycache__" in path.parts or path.suffix == ".pyc"


def _build_workspace_tar(task: Task) -> bytes:
    with tempfile.TemporaryDirectory(prefix="rlguard-ws-") as tmp:
        work = Path(tmp) / "workspace"
        shutil.copytree(task.workspace_dir, work, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        if task.git:
            _build_git_repo(task, work)
        data = tar_directory(work)
    if len(data) > MAX_WORKSPACE_TAR_BYTES:
        raise TaskError(f"{task.id}: workspace archive is {len(data)} bytes, over the 16 MiB cap")
    return data


def _git(work: Path, *args: str) -> None:
    env = git_env(work)
    result = subprocess.run(["git", *args], cwd=work, env=env, capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        raise TaskError(f"git {' '.join(args)} failed in {work}: {result.stderr.strip()}")


def _build_git_repo(task: Task, work: Path) -> None:
    """Commit the workspace on ``git.branch`` and each overlay on its own branch, deterministically."""
    assert task.git is not None
    spec = task.git
    _git(work, "init", "-q", "-b", spec.branch)
    _git(work, "add", "-A")
    _git(work, "commit", "-q", "-m", spec.message)
    for branch, rel in spec.branches.items():
        overlay = task.root / rel
        _git(work, "checkout", "-q", "-b", branch)
        for path in sorted(overlay.rglob("*")):
            if path.is_file() and not _ignored(path):
                target = work / path.relative_to(overlay)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, target)
        _git(work, "add", "-A")
        _git(work, "commit", "-q", "-m", f"Work in progress on {branch}")
        _git(work, "checkout", "-q", spec.branch)
    _forget_history_traces(work / ".git")


def _forget_history_traces(git_dir: Path) -> None:
    """No way to a commit beyond the declared refs: no reflog, ORIG_HEAD, stash, remotes or packs.

    The build only commits (every object is reachable from a declared branch), so what is left to
    remove are the traces git keeps of how the repository got there.
    """
    shutil.rmtree(git_dir / "logs", ignore_errors=True)
    for name in ("ORIG_HEAD", "FETCH_HEAD", "COMMIT_EDITMSG"):
        (git_dir / name).unlink(missing_ok=True)


def tar_directory(directory: Path) -> bytes:
    """A reproducible tar of ``directory``'s contents (sorted, fixed owner uid 1000, fixed mtime)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for path in sorted(directory.rglob("*")):
            rel = path.relative_to(directory).as_posix()
            info = tar.gettarinfo(str(path), arcname=rel)
            info.uid = info.gid = 1000
            info.uname = info.gname = "agent"
            info.mtime = 1704067200
            if info.isfile():
                with path.open("rb") as fh:
                    tar.addfile(info, fh)
            else:
                tar.addfile(info)
    return buf.getvalue()


def _format_validation_error(file: Path, exc: ValidationError) -> str:
    problems = []
    for err in exc.errors():
        field = ".".join(str(part) for part in err["loc"]) or "(top level)"
        problems.append(f"field '{field}': {err['msg']}")
    return f"{file}: " + "; ".join(problems)


def _load_task_dir(root: Path, suite: str) -> Task:
    file = root / TASK_FILE
    task_id = root.name
    if not _ID_RE.match(task_id):
        raise TaskError(f"{root}: task directory name must match {_ID_RE.pattern}")
    try:
        raw = yaml.safe_load(file.read_text())
    except OSError as exc:
        raise TaskError(f"{file}: cannot read: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise TaskError(f"{file}: not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise TaskError(f"{file}: must be a mapping of fields, got {type(raw).__name__}")
    try:
        spec = TaskFile.model_validate(raw)
    except ValidationError as exc:
        raise TaskError(_format_validation_error(file, exc)) from None
    task = Task(**spec.model_dump(), id=f"{suite}/{task_id}", suite=suite, task_id=task_id, root=root)
    if not task.workspace_dir.is_dir():
        raise TaskError(f"{root}: missing workspace/ directory")
    if task.grading.mode == "pytest":
        _check_pytest_task(task)
    elif not task.hidden_dir.is_dir() or not any(task.hidden_dir.rglob("test_*.py")):
        raise TaskError(f"{root}: hidden/ must hold at least one test_*.py file")
    if task.git:
        for branch, rel in task.git.branches.items():
            if not (root / rel).is_dir():
                raise TaskError(f"{file}: field 'git.branches.{branch}': no directory {rel!r}")
    if task.grading.mode == "isolated":
        # Refusals now, not after an episode: the grader counts the hidden tests as pytest collects them.
        expected_test_ids(task.hidden_dir, task.workspace_dir)
    return task


def _check_pytest_task(task: Task) -> None:
    """Refuse a ``pytest``-mode task whose node ids, pythonpath or solution cannot work."""
    where = task.root / TASK_FILE
    ids = task.expected_test_ids()
    if not ids:
        raise TaskError(f"{where}: pytest mode needs grading.fail_to_pass or grading.pass_to_pass node ids")
    for nodeid in ids:
        file, sep, rest = nodeid.partition("::")
        if not sep or not rest or not file.endswith(".py") or clean_name(file) != file:
            raise TaskError(f"{where}: {nodeid!r} is not a pytest node id (path/to/test_x.py::name)")
        if not ((task.workspace_dir / file).is_file() or (task.hidden_dir / file).is_file()):
            raise TaskError(f"{where}: node id {nodeid!r}: no test file {file!r} in workspace/ or hidden/")
    for rel in task.grading.pythonpath:
        if not (task.workspace_dir / rel).is_dir():
            raise TaskError(f"{where}: grading.pythonpath {rel!r} is not a directory of workspace/")
    if task.grading.reward not in ("all_or_nothing", "fraction"):
        raise TaskError(f"{where}: unknown grading.reward {task.grading.reward!r}")
    extra = task.protected_extra()
    touched = sorted(name for name in task.solution_files() if is_protected(name, extra))
    if touched:
        raise TaskError(f"{task.root}: solution/ changes files that grading restores: {touched[:5]}")


def suite_dir(name_or_dir: str | Path) -> Path:
    """A built-in suite's directory by name, or the given directory."""
    if (
        isinstance(name_or_dir, str)
        and _ID_RE.match(name_or_dir)
        and (BUILTIN_SUITES_DIR / name_or_dir).is_dir()
    ):
        return BUILTIN_SUITES_DIR / name_or_dir
    path = Path(name_or_dir)
    if not path.is_dir():
        builtin = sorted(p.name for p in BUILTIN_SUITES_DIR.iterdir() if p.is_dir())
        raise TaskError(f"no task suite {str(name_or_dir)!r}: not a directory nor a built-in suite {builtin}")
    return path.resolve()


def load_suite(name_or_dir: str | Path) -> list[Task]:
    """Every task of a suite (``"builtin"`` or a directory of task directories), sorted by id."""
    directory = suite_dir(name_or_dir)
    suite = directory.name
    if not _ID_RE.match(suite):
        raise TaskError(f"{directory}: suite directory name must match {_ID_RE.pattern}")
    tasks = [
        _load_task_dir(child, suite) for child in sorted(directory.iterdir()) if (child / TASK_FILE).is_file()
    ]
    if not tasks:
        raise TaskError(f"{directory}: no task directories (each needs a {TASK_FILE})")
    return tasks


class TaskRegistry:
    """Tasks from one or more suites, addressed as ``"suite/task_id"``."""

    def __init__(self, suites: list[str | Path] | tuple[str | Path, ...] = ("builtin",)) -> None:
        self._tasks: dict[str, Task] = {}
        for suite in suites:
            self.add_suite(suite)

    def add_suite(self, name_or_dir: str | Path) -> list[Task]:
        tasks = load_suite(name_or_dir)
        for task in tasks:
            if task.id in self._tasks and self._tasks[task.id].root != task.root:
                raise TaskError(
                    f"task id {task.id!r} is defined twice: {self._tasks[task.id].root}, {task.root}"
                )
            self._tasks[task.id] = task
        return tasks

    def get(self, task_id: str) -> Task:
        try:
            return self._tasks[task_id]
        except KeyError:
            known = ", ".join(sorted(self._tasks)[:20])
            raise TaskError(f"unknown task {task_id!r}; known: {known}") from None

    def list(self) -> list[Task]:
        return [self._tasks[key] for key in sorted(self._tasks)]

    def __len__(self) -> int:
        return len(self._tasks)

    def __contains__(self, task_id: object) -> bool:
        return task_id in self._tasks
