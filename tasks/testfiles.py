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
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from pathlib import PurePosixPath

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
