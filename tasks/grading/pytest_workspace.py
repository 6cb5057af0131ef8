"""The workspace ``pytest`` mode grades: the agent's files, with every test and test-infrastructure
file put back as the task shipped it and every file that would load into pytest or Python dropped.

A path is *protected* when pytest or the interpreter would read it as part of the test run rather
than as the code under test:

* anything under a directory named ``tests``, ``test`` or ``testing``; files named ``test_*.py`` or
  ``*_test.py``; the test files the task's node ids name; the files of ``hidden/`` (the test patch);
* test configuration: ``conftest.py`` anywhere, ``pytest.ini``, ``.pytest.ini``, ``pytest.toml``,
  ``.pytest.toml``, ``tox.ini``, ``setup.cfg``, ``pyproject.toml``;
* start-up hooks: ``sitecustomize.py``, ``usercustomize.py``, ``*.pth``, and package metadata
  (``*.dist-info``, ``*.egg-info``: entry points that declare pytest plugins).

A protected path holds exactly its pristine content, or nothing when the pristine task has none
(the agent's new ``conftest.py`` or ``pytest.ini`` is dropped). Bytecode (``__pycache__``, ``*.pyc``)
and ``.pytest_cache`` are dropped everywhere: a planted ``.pyc`` with the right header would be
loaded in place of a restored test. A non-directory the agent put where a protected file's parent
directory belongs (a symlink ``tests -> elsewhere``) is dropped too, so restored files land where
pytest looks for them.
"""

from __future__ import annotations

import fnmatch
import io
import tarfile
from collections.abc import Iterable
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from rlguard.errors import RlguardError

if TYPE_CHECKING:
    from rollout.tasks import Task

MAX_GRADING_WORKSPACE_BYTES = 256 * 1024 * 1024
TEST_DIRS = frozenset({"tests", "test", "testing"})
TEST_FILE_GLOBS = ("test_*.py", "*_test.py")
INFRA_NAMES = frozenset(
    {
        "conftest.py",
        "pytest.ini",
        ".pytest.ini",
        "pytest.toml",
        ".pytest.toml",
        "tox.ini",
        "setup.cfg",
        "pyproject.toml",
        "sitecustomize.py",
        "usercustomize.py",
    }
)
METADATA_SUFFIXES = (".dist-info", ".egg-info")
DROPPED_DIRS = frozenset({"__pycache__", ".pytest_cache"})


def clean_name(name: str) -> str | None:
    """A member name relative to /workspace, or None when it points outside it."""
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts:
        return None
    parts = [part for part in path.parts if part != "."]
    return "/".join(parts) or None


def expected_ids(task: Task) -> list[str]:
    """FAIL_TO_PASS then PASS_TO_PASS, each once."""
    return list(dict.fromkeys([*task.grading.fail_to_pass, *task.grading.pass_to_pass]))


def test_files(task: Task) -> list[str]:
    """The files the expected node ids live in, in first-seen order (what pytest is given)."""
    return list(dict.fromkeys(nodeid.split("::", 1)[0] for nodeid in expected_ids(task)))


def is_dropped(name: str) -> bool:
    """Bytecode and pytest's cache: never carried into grading."""
    parts = name.split("/")
    return any(part in DROPPED_DIRS for part in parts) or name.endswith((".pyc", ".pyo"))


def is_protected(name: str, extra: Iterable[str] = ()) -> bool:
    """Whether pytest or Python would load ``name`` as test code, test config or a start-up hook."""
    parts = name.split("/")
    if parts[0] == ".git":
        return False
    base = parts[-1]
    if any(part in TEST_DIRS for part in parts) or base in INFRA_NAMES or base.endswith(".pth"):
        return True
    if any(fnmatch.fnmatchcase(base, pattern) for pattern in TEST_FILE_GLOBS):
        return True
    if any(part.endswith(METADATA_SUFFIXES) for part in parts):
        return True
    return any(name == p or name.startswith(p + "/") for p in extra)


def explicit_protected(task: Task) -> list[str]:
    """Paths protected by the task itself: the test patch's files, the node ids' files, ``restore``."""
    hidden = task.hidden_dir
    overlay = (
        [p.relative_to(hidden).as_posix() for p in sorted(hidden.rglob("*")) if p.is_file()]
        if hidden.is_dir()
        else []
    )
    return [*overlay, *test_files(task), *(p.strip("/") for p in task.grading.restore)]


def pristine_members(task: Task) -> dict[str, tuple[tarfile.TarInfo, bytes | None]]:
    """The task's pristine tree (workspace at base plus ``hidden/``, the test patch) by member name."""
    members: dict[str, tuple[tarfile.TarInfo, bytes | None]] = {}
    with tarfile.open(fileobj=io.BytesIO(task.workspace_tar())) as tar:
        for member in tar:
            name = clean_name(member.name)
            if name is None:
                continue
            data = tar.extractfile(member).read() if member.isfile() else None  # type: ignore[union-attr]
            member.name = name
            members[name] = (member, data)
    if task.hidden_dir.is_dir():
        for path in sorted(task.hidden_dir.rglob("*")):
            if "__pycache__" in path.parts:
                continue
            name = path.relative_to(task.hidden_dir).as_posix()
            info = tarfile.TarInfo(name)
            info.uid = info.gid = 1000
            info.uname = info.gname = "agent"
            info.mtime = 1704067200
            if path.is_dir():
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                members[name] = (info, None)
            else:
                data = path.read_bytes()
                info.size, info.mode = len(data), 0o644
                members[name] = (info, data)
    return members


def _parents(name: str) -> list[str]:
    parts = name.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]


def grading_workspace_tar(task: Task, final_workspace_tar: bytes) -> bytes:
    """The final workspace with protected paths pristine and dropped paths gone (module docstring)."""
    extra = explicit_protected(task)
    pristine = pristine_members(task)
    restored = {name: entry for name, entry in pristine.items() if is_protected(name, extra)}
    needed_dirs = {parent for name in restored for parent in _parents(name)}
    out = io.BytesIO()
    total = 0
    with tarfile.open(fileobj=out, mode="w") as dst:
        try:
            src = tarfile.open(fileobj=io.BytesIO(final_workspace_tar))  # noqa: SIM115 (closed below)
        except tarfile.TarError as exc:
            raise RlguardError(f"final workspace is not a tar archive: {exc}") from exc
        with src:
            for member in src:
                name = clean_name(member.name)
                if name is None or is_dropped(name) or is_protected(name, extra):
                    continue
                if not (member.isfile() or member.isdir() or member.issym()):
                    continue  # devices, fifos and hard links have no business in a graded workspace
                if name in needed_dirs and not member.isdir():
                    continue
                total += member.size
                if total > MAX_GRADING_WORKSPACE_BYTES:
                    raise RlguardError(f"final workspace is over {MAX_GRADING_WORKSPACE_BYTES} bytes")
                member.name = name
                dst.addfile(member, src.extractfile(member) if member.isfile() else None)
        for name in sorted(needed_dirs):
            if name not in restored:
                info = tarfile.TarInfo(name)
                info.type, info.mode, info.uid, info.gid, info.mtime = (
                    tarfile.DIRTYPE,
                    0o755,
                    1000,
                    1000,
                    1704067200,
                )
                dst.addfile(info)
        for _name, (info, data) in restored.items():
            dst.addfile(info, io.BytesIO(data) if data is not None else None)
    return out.getvalue()


def validate_layout(task: Task) -> None:
    """Refuse (at suite load) a ``pytest`` task whose node ids or solution cannot work."""
    where = task.root / "task.yaml"
    ids = expected_ids(task)
    if not ids:
        raise RlguardError(
            f"{where}: pytest mode needs grading.fail_to_pass or grading.pass_to_pass node ids"
        )
    for nodeid in ids:
        file, sep, rest = nodeid.partition("::")
        if not sep or not rest or not file.endswith(".py") or clean_name(file) != file:
            raise RlguardError(
                f"{where}: {nodeid!r} is not a pytest node id of the form path/to/test_x.py::name"
            )
        if not ((task.workspace_dir / file).is_file() or (task.hidden_dir / file).is_file()):
            raise RlguardError(f"{where}: node id {nodeid!r}: no test file {file!r} in workspace/ or hidden/")
    for rel in task.grading.pythonpath:
        if not (task.workspace_dir / rel).is_dir():
            raise RlguardError(f"{where}: grading.pythonpath {rel!r} is not a directory of workspace/")
    extra = explicit_protected(task)
    touched = sorted(name for name in task.solution_files() if is_protected(name, extra))
    if touched:
        raise RlguardError(
            f"{task.root}: solution/ changes test or test-infra files grading restores: {touched[:5]}"
        )
