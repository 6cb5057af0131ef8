"""Task suites: ``<suite>/<task_id>/task.yaml`` + ``workspace/`` + ``hidden/`` loaded into typed tasks.

A task directory is data, not code: the loader validates it once (clear errors naming the file and
the field), and everything downstream — the gateway creating a sandbox, the grader, the scripted
policy — reads the same ``Task`` object. ``hidden/`` and ``solution/`` never leave the host except
into a grading container; only ``workspace/`` (plus, for tasks that declare ``git``, a deterministic
repository built from it) is copied into the agent's sandbox.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path, PurePosixPath
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from guard.types import Integrity
from sandbox.settings import SandboxLimits
from tasks.archive import tar_directory
from tasks.collect import expected_test_ids
from tasks.environments import EnvironmentSpec, environment_image
from tasks.errors import TaskError
from tasks.gitenv import git_env
from tasks.safefiles import (
    Entry,
    TreeLimits,
    is_real_dir,
    is_regular_file,
    links_inside,
    present,
    read_file,
    read_tree,
    regular_files,
    walk,
)
from tasks.testfiles import clean_name, is_protected, restored_globs

BUILTIN_SUITES_DIR = Path(__file__).resolve().parent / "suites"
TASK_FILE = "task.yaml"
MAX_WORKSPACE_TAR_BYTES = 16 * 1024 * 1024
MAX_TASK_FILE_BYTES = 1024 * 1024
# A workspace is copied into a sandbox whole: no file or tree larger than its archive may be.
WORKSPACE_LIMITS = TreeLimits(file_bytes=MAX_WORKSPACE_TAR_BYTES, total_bytes=MAX_WORKSPACE_TAR_BYTES)
_ID_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
# Where graders put their files in a grading container (``tasks.grading``): never the agent's to read.
GRADER_HIDDEN: tuple[str, ...] = ("/tmp/grader/**", "/tmp/rlguard-grader-*/**")
# The repository's own gates (git hooks, the pre-commit configuration) in tasks that are git checkouts.
GATES_PROTECTED: tuple[str, ...] = (".git/hooks/**", ".pre-commit-config.yaml")
_GLOB_CHARS = re.compile(r"[*?\[]")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GradingSpec(_Strict):
    """How the tests decide the reward; ``mode`` picks the grading mode (``tasks.grading.modes``)."""

    mode: str = Field(
        "isolated",
        description="A registered grading mode (tasks.grading.modes). isolated: authored hidden tests, "
        "workspace code behind proxies; pytest: the project's own suite in-process (SWE-bench "
        "compatible); see docs/grading.md",
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

    @field_validator("mode")
    @classmethod
    def _registered_mode(cls, mode: str) -> str:
        """``mode`` must name a registered grading mode; an unknown one is refused listing the known."""
        from tasks.grading.modes import GRADING_MODES  # here: the modes' graders import this module

        return GRADING_MODES.validator()(mode)

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


class IntegritySpec(_Strict):
    """What the agent may never read, never change, or change only for grading to undo: globs over
    absolute paths; a relative glob is anchored at ``/workspace``, ``**/`` matches at any depth and
    a directory covers what lies below it. See docs/tasks.md, "Integrity surface"."""

    hidden: list[str] = Field(default_factory=list, description="Never readable (answer keys, graders)")
    protected: list[str] = Field(
        default_factory=list, description="Never changed (harness scripts, reward code, result files)"
    )
    restored: list[str] = Field(
        default_factory=list, description="Changes run, are flagged, and grading puts the files back"
    )

    @field_validator("hidden", "protected", "restored")
    @classmethod
    def _globs(cls, globs: list[str]) -> list[str]:
        for glob in globs:
            if not glob.strip() or any(c in glob for c in "\n\r\x00"):
                raise ValueError(f"globs must be non-empty single-line strings; got {glob!r}")
            if not glob.startswith("/") and ".." in glob.split("/"):
                raise ValueError(
                    f"relative globs stay inside the workspace (use an absolute path); got {glob!r}"
                )
        return [g.strip() for g in globs]


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
    protected_paths: list[str] = Field(
        default_factory=list,
        description="Absolute paths the agent may never read (older name of integrity.hidden)",
    )
    integrity: IntegritySpec | None = Field(
        None,
        description="What the agent may never read (hidden), never change (protected) or change only for "
        "grading to undo (restored); defaults are added by Task.integrity_surface",
    )
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
        its node ids' files, ``grading.restore`` and its declared ``integrity.restored`` globs."""
        overlay = regular_files(self.hidden_dir) if present(self.hidden_dir) else []
        declared = self.integrity.restored if self.integrity else []
        return [*overlay, *self.test_files(), *(p.strip("/") for p in self.grading.restore), *declared]

    def integrity_surface(self) -> Integrity:
        """The surface the guard applies to this task's episodes: what the task declares, plus
        - hidden: ``protected_paths`` and where graders keep their files (``GRADER_HIDDEN``);
        - protected: the repository's gates (``GATES_PROTECTED``) when the workspace is a git
          checkout (``git:``) or a real repository graded in ``pytest`` mode;
        - restored: exactly what grading puts back, from the function grading uses: in ``pytest``
          mode ``tasks.testfiles.restored_globs`` of the task's extras (tests, test configuration,
          start-up hooks, the test patch, ``grading.restore``); in ``isolated`` mode ``grading.restore``
          (which holds the declared ``restored`` paths too, see ``_load_task_dir``)."""
        declared = self.integrity or IntegritySpec()
        gates = GATES_PROTECTED if (self.git is not None or self.grading.mode == "pytest") else ()
        if self.grading.mode == "pytest":
            restored: tuple[str, ...] = restored_globs(self.protected_extra())
        else:
            restored = tuple(p.strip("/") for p in self.grading.restore)
        return Integrity(
            hidden=tuple(dict.fromkeys((*self.protected_paths, *declared.hidden, *GRADER_HIDDEN))),
            protected=tuple(dict.fromkeys((*declared.protected, *gates))),
            restored=tuple(dict.fromkeys(restored)),
        )

    def hidden_files(self) -> dict[str, bytes]:
        """``hidden/`` as ``{relative path: bytes}``: regular files only, never through a link."""
        return read_tree(self.hidden_dir) if present(self.hidden_dir) else {}

    def solution_files(self) -> dict[str, str]:
        """Reference solution as ``{workspace-relative path: full new content}``."""
        if not present(self.solution_dir):
            return {}
        files = read_tree(self.solution_dir)
        try:
            return {name: data.decode() for name, data in files.items()}
        except UnicodeDecodeError as exc:
            raise TaskError(f"{self.solution_dir}: solution files must be UTF-8 text: {exc}") from None

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
            for entry in _workspace_entries(directory):
                stamp.append((f"{directory}/{entry.name}\0{entry.target}", *_stat(directory / entry.name)))
        return tuple(stamp)


def _stat(path: Path) -> tuple[int, int]:
    st = os.lstat(path)
    return st.st_size, st.st_mtime_ns


def _workspace_entries(directory: Path) -> list[Entry]:
    """A workspace-like tree: directories, regular files and relative links that stay inside it
    (a repository may hold those); a link out of it, a device or a FIFO is refused."""
    return walk(directory, links=links_inside, limits=WORKSPACE_LIMITS, skip=frozenset({"__pycache__"}))


# Built archives by (task root, file stamps): git-backed workspaces take ~100 ms to build.
_TAR_CACHE: dict[tuple[Path, tuple], bytes] = {}


def _ignored(path: Path) -> bool:
    return "__pycache__" in path.parts or path.suffix == ".pyc"


def _build_workspace_tar(task: Task) -> bytes:
    with tempfile.TemporaryDirectory(prefix="rlguard-ws-") as tmp:
        work = Path(tmp) / "workspace"
        _copy_tree(task.workspace_dir, work)
        if task.git:
            _build_git_repo(task, work)
        data = tar_directory(work)
    if len(data) > MAX_WORKSPACE_TAR_BYTES:
        raise TaskError(f"{task.id}: workspace archive is {len(data)} bytes, over the 16 MiB cap")
    return data


def _copy_tree(source: Path, target: Path) -> None:
    """Copy a workspace-like tree without reading through a link: files are read with
    ``tasks.safefiles``, in-tree links are recreated as links (bytecode is left out)."""
    target.mkdir(parents=True, exist_ok=True)
    for entry in _workspace_entries(source):
        if _ignored(Path(entry.name)):
            continue
        dest = target / entry.name
        if entry.kind == "dir":
            dest.mkdir(exist_ok=True)
        elif entry.kind == "link":
            dest.parent.mkdir(parents=True, exist_ok=True)
            if dest.is_symlink() or dest.exists():
                dest.unlink()
            os.symlink(entry.target, dest)
        else:
            dest.parent.mkdir(parents=True, exist_ok=True)
            if dest.is_symlink():
                dest.unlink()
            dest.write_bytes(read_file(source, entry.name, MAX_WORKSPACE_TAR_BYTES))


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
        _git(work, "checkout", "-q", "-b", branch)
        _copy_tree(task.root / rel, work)
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
        raw = yaml.safe_load(read_file(root, TASK_FILE, MAX_TASK_FILE_BYTES).decode("utf-8", "replace"))
    except yaml.YAMLError as exc:
        raise TaskError(f"{file}: not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise TaskError(f"{file}: must be a mapping of fields, got {type(raw).__name__}")
    try:
        spec = TaskFile.model_validate(raw)
    except ValidationError as exc:
        raise TaskError(_format_validation_error(file, exc)) from None
    spec = _restore_declared(spec, file)
    task = Task(**spec.model_dump(), id=f"{suite}/{task_id}", suite=suite, task_id=task_id, root=root)
    if not is_real_dir(root, "workspace"):
        raise TaskError(f"{root}: missing workspace/ directory (a real directory, not a link)")
    _workspace_entries(task.workspace_dir)  # links out of the tree, devices, FIFOs: refused now
    hidden = task.hidden_files()  # links, devices, FIFOs, files over the limits: refused now
    if task.grading.mode == "pytest":
        _check_pytest_task(task)
    elif not any(PurePosixPath(name).name.startswith("test_") and name.endswith(".py") for name in hidden):
        raise TaskError(f"{root}: hidden/ must hold at least one test_*.py file")
    task.solution_files()
    if task.git:
        for branch, rel in task.git.branches.items():
            if clean_name(rel) != rel.strip("/") or not is_real_dir(root, rel.strip("/")):
                raise TaskError(f"{file}: field 'git.branches.{branch}': no directory {rel!r} in the task")
            _workspace_entries(root / rel.strip("/"))
    if task.grading.mode == "isolated":
        # Refusals now, not after an episode: the grader counts the hidden tests as pytest collects them.
        expected_test_ids(task.hidden_dir, task.workspace_dir)
    return task


def _restore_declared(spec: TaskFile, file: Path) -> TaskFile:
    """In ``isolated`` mode grading restores ``grading.restore`` (workspace paths, not globs), so a
    declared ``integrity.restored`` path joins it: whatever the guard lets change as restored,
    grading puts back. (In ``pytest`` mode grading restores ``protected_extra()``, which holds them.)"""
    if spec.integrity is None or not spec.integrity.restored or spec.grading.mode != "isolated":
        return spec
    paths: list[str] = []
    for glob in spec.integrity.restored:
        path = glob.strip("/").removesuffix("/**")
        if glob.startswith("/") or _GLOB_CHARS.search(path):
            raise TaskError(
                f"{file}: field 'integrity.restored': isolated grading restores workspace paths, not globs "
                f"({glob!r}); name a file or a directory (dir/** is the directory)"
            )
        paths.append(path)
    merged = list(dict.fromkeys([*spec.grading.restore, *paths]))
    return spec.model_copy(update={"grading": spec.grading.model_copy(update={"restore": merged})})


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
        if not (is_regular_file(task.workspace_dir, file) or is_regular_file(task.hidden_dir, file)):
            raise TaskError(f"{where}: node id {nodeid!r}: no test file {file!r} in workspace/ or hidden/")
    for rel in task.grading.pythonpath:
        if not is_real_dir(task.workspace_dir, rel.strip("/")):
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
        _load_task_dir(child, suite)
        for child in sorted(directory.iterdir())
        if os.path.lexists(child / TASK_FILE)
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
