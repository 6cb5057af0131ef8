"""Protected-path matching: prefixes, any-depth names, relative paths, and shell globs."""

import pytest

from guard.paths import ProtectedPaths, absolute
from guard.settings import DEFAULT_PROTECTED_PATHS

PROTECTED = ProtectedPaths([*DEFAULT_PROTECTED_PATHS, "tests/private"])


@pytest.mark.parametrize(
    ("path", "cwd", "pattern"),
    [
        ("/hidden", "/workspace", "/hidden"),
        ("/hidden/tests/test_a.py", "/workspace", "/hidden"),
        ("../hidden/x", "/workspace", "/hidden"),
        ("hidden/x", "/", "/hidden"),
        ("//grader//run.sh", "/workspace", "/grader"),
        ("/workspace/tests/hidden_tests/t.py", "/workspace", "**/hidden_tests/**"),
        ("a/.hidden/b", "/workspace", "**/.hidden/**"),
        ("/proc/1/root/etc/passwd", "/workspace", "/proc/*/root"),
        ("/proc/self/root", "/workspace", "/proc/*/root"),
        ("tests/private/case.json", "/workspace", "tests/private"),
        ("/hid*/t.py", "/workspace", "/hidden"),
        ("/h?dden", "/workspace", "/hidden"),
        ("/[gh]rader/x", "/workspace", "/grader"),
    ],
)
def test_protected(path: str, cwd: str, pattern: str) -> None:
    assert PROTECTED.match(path, cwd) == pattern


@pytest.mark.parametrize(
    "path",
    [
        "/workspace/hidden.py",
        "/workspace/solution/notes.md",
        "/hiddenness",
        "tests/test_a.py",
        "/workspace/tests/*.py",
        "/proc/1/status",
        "src/*/x.py",
        "",
    ],
)
def test_not_protected(path: str) -> None:
    assert PROTECTED.match(path) is None


def test_recursive_glob_from_root_reaches_protected_trees() -> None:
    assert PROTECTED.match("/**/hidden_tests/x.py") is not None
    assert PROTECTED.match("/workspace/src/**/*.py") is None


def test_absolute_folds_dots_and_home() -> None:
    assert absolute("../../etc/passwd", "/workspace/src") == "/etc/passwd"
    assert absolute("~/.bashrc") == "/root/.bashrc"
    assert absolute("./a//b/") == "/workspace/a/b"
