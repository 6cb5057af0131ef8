"""Which workspace paths are tests, test infrastructure or start-up hooks (``pytest`` grading).

Shared by the task loader (a solution must not need a change grading would undo) and the grader
(``tasks.grading.pytest_workspace`` restores these paths from the pristine task). A path is
*protected* when pytest or the interpreter would read it as part of the test run rather than as the
code under test:

* anything under a directory named ``tests``, ``test`` or ``testing``; files named ``test_*.py`` or
  ``*_test.py``; plus the paths a task adds (its test patch, its node ids' files, ``restore``);
* test configuration: ``conftest.py`` anywhere, ``pytest.ini``, ``.pytest.ini``, ``pytest.toml``,
  ``.pytest.toml``, ``tox.ini``, ``setup.cfg``, ``pyproject.toml``;
* start-up hooks: ``sitecustomize.py``, ``usercustomize.py``, ``*.pth``, and package metadata
  (``*.dist-info``, ``*.egg-info``: entry points that declare pytest plugins).

*Dropped* paths (bytecode, pytest's cache) never reach a grading container at all.

The same set, as globs, is what the guard treats as *restored* for such tasks (``restored_globs``;
``Task.integrity_surface``): one function decides both what grading puts back and which changes
the guard lets run, flagged, instead of decoying them. ``is_protected`` is that glob set matched
with the guard's own matcher (``guard.paths.ProtectedPaths``), so the two cannot disagree.
"""

from __future__ import annotations

import fnmatch
import functools
import re
from collections.abc import Iterable
from pathlib import PurePosixPath

from guard.paths import ProtectedPaths

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
# every path above as a glob (``**/`` at any depth; a directory glob covers what lies below it)
RESTORED_GLOBS: tuple[str, ...] = (
    *(f"**/{d}/**" for d in sorted(TEST_DIRS)),
    *(f"**/{g}" for g in TEST_FILE_GLOBS),
    *(f"**/{name}" for name in sorted(INFRA_NAMES)),
    "**/*.pth",
    *(f"**/*{suffix}/**" for suffix in METADATA_SUFFIXES),
)
_WORKSPACE = "/workspace"
_GLOB = re.compile(r"[*?]")


def clean_name(name: str) -> str | None:
    """A member name relative to /workspace, or None when it points outside it."""
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts:
        return None
    parts = [part for part in path.parts if part != "."]
    return "/".join(parts) or None


def is_dropped(name: str) -> bool:
    """Bytecode and pytest's cache: never carried into grading."""
    parts = name.split("/")
    return any(part in DROPPED_DIRS for part in parts) or name.endswith((".pyc", ".pyo"))


def _literal(path: str) -> str:
    """A workspace path as a glob that matches exactly it (``[``, ``*``, ``?`` bracketed)."""
    return re.sub(r"([\[*?])", r"[\1]", path.strip("/"))


def restored_globs(extra: Iterable[str] = ()) -> tuple[str, ...]:
    """The globs of everything ``is_protected`` matches: ``RESTORED_GLOBS`` plus a task's extras
    (workspace paths, literal, or globs when they hold ``*`` or ``?``)."""
    return (*RESTORED_GLOBS, *(p if _GLOB.search(p) else _literal(p) for p in extra if p.strip("/")))


@functools.lru_cache(maxsize=256)
def _matcher(extra: tuple[str, ...]) -> ProtectedPaths:
    return ProtectedPaths(restored_globs(extra))


def is_test_side(name: str, extra: Iterable[str] = ()) -> bool:
    """Tests proper, not configuration: under a test directory, a test module, a ``conftest.py``, or
    one of the task's own test paths (``extra``)."""
    parts = name.split("/")
    if parts[0] == ".git":
        return False
    base = parts[-1]
    if any(part in TEST_DIRS for part in parts) or base == "conftest.py":
        return True
    if any(fnmatch.fnmatchcase(base, pattern) for pattern in TEST_FILE_GLOBS):
        return True
    return any(name == p or name.startswith(p + "/") for p in extra)


def is_protected(name: str, extra: Iterable[str] = ()) -> bool:
    """Whether pytest or Python would load ``name`` as test code, test config or a start-up hook
    (or a task's extra names it): the glob set ``restored_globs(extra)``, matched as the guard matches it."""
    if name.split("/")[0] == ".git":
        return False
    return _matcher(tuple(extra)).match(f"{_WORKSPACE}/{name}") is not None
