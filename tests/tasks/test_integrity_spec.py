"""``integrity`` in the task format: validated, defaults by grading mode, and ``restored`` the very
set grading restores (``tasks.testfiles``), so the guard lets run exactly what grading undoes."""

from pathlib import Path

import pytest

from guard.integrity import Surface
from guard.types import Integrity
from tasks.errors import TaskError
from tasks.spec import GATES_PROTECTED, GRADER_HIDDEN, load_suite
from tasks.testfiles import is_protected, restored_globs


def _task(root: Path, yaml_text: str, *, git: bool = False) -> Path:
    task = root / "demo"
    (task / "workspace" / "tests").mkdir(parents=True)
    (task / "workspace" / "run.sh").write_text("#!/bin/sh\npython -m pytest -q\n")
    (task / "workspace" / "tests" / "test_a.py").write_text("def test_a():\n    assert True\n")
    (task / "hidden").mkdir()
    (task / "hidden" / "test_pkg.py").write_text("def test_x():\n    pass\n")
    (task / "task.yaml").write_text(yaml_text + ("git: {branch: main}\n" if git else ""))
    return task


def test_declared_surface_with_defaults(tmp_path: Path) -> None:
    _task(
        tmp_path / "s",
        "instructions: x\nprotected_paths: [/secret]\nintegrity:\n  hidden: [evals/**]\n"
        "  protected: [run.sh]\n  restored: [fixtures/**]\n",
        git=True,
    )
    (task,) = load_suite(tmp_path / "s")
    surface = task.integrity_surface()
    assert surface.hidden == ("/secret", "evals/**", *GRADER_HIDDEN)
    assert surface.protected == ("run.sh", *GATES_PROTECTED)  # a git checkout: its hooks too
    assert surface.restored == ("tests", "fixtures")  # isolated mode: what grading.restore restores
    assert task.grading.restore == ["tests", "fixtures"]  # so grading restores what the guard lets run


def test_builtin_tasks_declare_and_derive(tmp_path: Path) -> None:
    tasks = {t.task_id: t for t in load_suite("builtin")}
    assert "/reference/**" in tasks["matrix-transpose"].integrity_surface().hidden
    assert tasks["bank-ledger"].integrity_surface().protected == GATES_PROTECTED
    assert tasks["interval-merge"].integrity_surface().protected == ()
    assert all(t.integrity_surface().restored == ("tests",) for t in tasks.values())


@pytest.mark.parametrize(
    ("yaml_text", "message"),
    [
        ("instructions: x\nintegrity: {hidden: ['']}\n", "non-empty"),
        ("instructions: x\nintegrity: {protected: [../outside]}\n", "inside the workspace"),
        ("instructions: x\nintegrity: {secret: [a]}\n", "integrity.secret"),
        ("instructions: x\nintegrity: {restored: ['tests/*.py']}\n", "not globs"),
    ],
)
def test_bad_declarations_name_the_field(tmp_path: Path, yaml_text: str, message: str) -> None:
    _task(tmp_path / "s", yaml_text)
    with pytest.raises(TaskError, match=message):
        load_suite(tmp_path / "s")


NAMES = [
    "tests/helpers.py",
    "pkg/testing/x.py",
    "pkg/test_a.py",
    "a_test.py",
    "pkg/conftest.py",
    "pytest.ini",
    "sub/tox.ini",
    "setup.cfg",
    "pyproject.toml",
    "src/sitecustomize.py",
    "x.pth",
    "lib/y.pth",
    "foo-1.0.dist-info/entry_points.txt",
    "pkg.egg-info/PKG-INFO",
    "pkg/core.py",
    "README.rst",
    "setup.py",
    ".git/config",
    ".git/hooks/pre-commit",
    "pkg/contest.py",
    "testsuite/x.py",
    "src/tests.py",
    "data/golden.json",
    "data/x[1].json",
    "docs/test_plan.md",
    "tests",
]


@pytest.mark.parametrize("extra", [(), ("data",), ("data/x[1].json",), ("docs/*.md",)])
def test_restored_is_what_grading_restores(extra: tuple[str, ...]) -> None:
    """The guard's restored set for a pytest-mode task and grading's ``is_protected`` agree on
    every name (``.git`` aside: grading never restores it, nor does the guard count it restored)."""
    surface = Surface(Integrity(restored=restored_globs(extra)))
    for name in NAMES:
        guard_says = surface.restored.match(f"/workspace/{name}") is not None and not name.startswith(".git")
        assert guard_says == is_protected(name, extra), name


def test_grading_restores_the_documented_paths() -> None:
    for name in NAMES[:14]:
        assert is_protected(name), name
    for name in (
        "pkg/core.py",
        "README.rst",
        "setup.py",
        ".git/config",
        "pkg/contest.py",
        "data/golden.json",
    ):
        assert not is_protected(name), name
    assert is_protected("data/golden.json", ["data"]) and is_protected("data/x[1].json", ["data/x[1].json"])
    assert not is_protected("data/x1.json", ["data/x[1].json"])  # an extra path is literal
    assert is_protected("docs/test_plan.md", ["docs/*.md"])  # a declared restored glob is a glob
