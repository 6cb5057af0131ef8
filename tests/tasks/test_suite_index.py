"""Suites by name: built-in first, then registered or built into the state directory, then directories."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tasks.errors import TaskError
from tasks.spec import BUILTIN_SUITES_DIR, load_suite
from tasks.suite_index import SuiteIndex


def small_suite(parent: Path, name: str, task: str = "lru-cache") -> Path:
    """A real one-task suite: a built-in task copied under ``parent/name``."""
    directory = parent / name
    shutil.copytree(BUILTIN_SUITES_DIR / "builtin" / task, directory / task)
    return directory


def test_registered_suites_resolve_by_name_and_load(tmp_path: Path) -> None:
    index = SuiteIndex(tmp_path / "state")
    assert index.known() == {"builtin": BUILTIN_SUITES_DIR / "builtin"}
    suite = small_suite(tmp_path / "elsewhere", "mine")
    assert index.register(suite) == "mine"
    assert index.resolve("mine") == suite.resolve()
    assert [t.id for t in load_suite(index.resolve("mine"))] == ["mine/lru-cache"]
    assert index.resolve("builtin") == BUILTIN_SUITES_DIR / "builtin"
    assert list(index.known()) == ["builtin", "mine"]
    # the index is a small JSON file in the state directory
    written = json.loads((tmp_path / "state" / "tasks" / "suites.json").read_text())
    assert written == {"mine": str(suite.resolve())}


def test_a_suite_built_into_the_state_directory_is_known_without_an_entry(tmp_path: Path) -> None:
    index = SuiteIndex(tmp_path / "state")
    built = small_suite(index.built_dir("realworld").parent, "realworld")
    (index.built_dir("empty")).mkdir()  # a failed build leaves no tasks: not a suite
    assert index.registered() == {"realworld": built.resolve()}
    assert index.all_dirs() == [BUILTIN_SUITES_DIR / "builtin", built.resolve()]


def test_a_registration_wins_over_the_built_directory_and_gone_ones_drop_out(tmp_path: Path) -> None:
    index = SuiteIndex(tmp_path / "state")
    small_suite(index.built_dir("realworld").parent, "realworld")
    moved = small_suite(tmp_path / "other", "realworld", "roman-numerals")
    index.register(moved)
    assert index.resolve("realworld") == moved.resolve()
    shutil.rmtree(moved)
    assert index.resolve("realworld") == index.built_dir("realworld").resolve()


def test_unknown_names_are_one_line_naming_the_known_suites(tmp_path: Path) -> None:
    index = SuiteIndex(tmp_path / "state")
    index.register(small_suite(tmp_path, "mine"))
    with pytest.raises(TaskError) as caught:
        index.resolve("realworld")
    message = str(caught.value)
    assert message == "no suite 'realworld': not a known suite name (builtin, mine) nor a directory"
    # a plain directory still works, named by its directory
    plain = small_suite(tmp_path / "x", "plain")
    assert index.resolve(str(plain)) == plain.resolve()


def test_registration_refuses_builtin_names_bad_names_and_empty_directories(tmp_path: Path) -> None:
    index = SuiteIndex(tmp_path / "state")
    with pytest.raises(TaskError, match="built-in suite's name"):
        index.register(small_suite(tmp_path / "a", "builtin"))
    with pytest.raises(TaskError, match="must match"):
        index.register(small_suite(tmp_path / "b", "Bad Name"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(TaskError, match="no task directories"):
        index.register(tmp_path / "empty")
    assert index.registered() == {}


def test_a_damaged_index_is_one_clear_error(tmp_path: Path) -> None:
    index = SuiteIndex(tmp_path / "state")
    index.path.parent.mkdir(parents=True)
    index.path.write_text("{not json")
    with pytest.raises(TaskError, match="cannot read the suite index"):
        index.resolve("mine")
