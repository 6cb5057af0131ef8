"""``rlguard tasks list|check|import`` and ``rlguard grade`` as a user runs them (subprocess, real Docker)."""

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tasks.spec import load_suite

pytestmark = pytest.mark.docker


def rlguard(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "RLGUARD_STATE_DIR": str(tmp_path / "state"),
        "RLGUARD_INSTANCE": f"test-tasks-cli-{uuid.uuid4().hex[:8]}",
        "COLUMNS": "250",
    }
    return subprocess.run(
        [sys.executable, "-m", "rlguard", *args], env=env, capture_output=True, text=True, timeout=600
    )


def test_tasks_list_shows_modes(mini_suite, tmp_path):
    result = rlguard(tmp_path, "tasks", "list", str(mini_suite), "--json")
    assert result.returncode == 0, result.stderr
    rows = {row["id"]: row for row in json.loads(result.stdout)}
    assert rows["mini/inflection__inflection-1"]["mode"] == "pytest"
    assert rows["mini/inflection__inflection-1"]["tests"] == 456
    builtin = json.loads(rlguard(tmp_path, "tasks", "list", "--json").stdout)
    assert {row["mode"] for row in builtin} == {"isolated"}


def test_tasks_check_passes_a_good_suite_and_fails_loudly_on_a_bad_one(mini_suite, tmp_path):
    good = rlguard(tmp_path, "tasks", "check", str(mini_suite), "--json")
    assert good.returncode == 0, good.stderr
    assert all(row["ok"] and row["solution_reward"] == 1.0 for row in json.loads(good.stdout))
    bad_suite = tmp_path / "badsuite"
    shutil.copytree(mini_suite / "inflection__inflection-2", bad_suite / "already-solved")
    task_dir = bad_suite / "already-solved"
    shutil.copy(task_dir / "solution" / "inflection" / "__init__.py", task_dir / "workspace" / "inflection")
    bad = rlguard(tmp_path, "tasks", "check", str(bad_suite), "--json")
    assert bad.returncode == 2
    assert "failed the check: badsuite/already-solved" in bad.stderr
    assert "untouched workspace already scores 1.0" in bad.stdout


def test_grade_prints_reward_and_per_test_outcomes(mini_suite, rows_and_repos, tmp_path):
    rows_path, repos_dir = rows_and_repos
    # imported through the command line, the suite is registered: every command finds it by name
    out = tmp_path / "imported" / "minibyname"
    imported = rlguard(tmp_path, "tasks", "import", "swebench", str(rows_path), "--repos", str(repos_dir),
                       "--out", str(out), "--json")  # fmt: skip
    assert imported.returncode == 0, imported.stderr
    assert json.loads(imported.stdout)["suite"] == "minibyname"
    listed = rlguard(tmp_path, "tasks", "list", "minibyname", "--json")
    assert "minibyname/inflection__inflection-2" in {row["id"] for row in json.loads(listed.stdout)}
    gold = json.loads(rows_path.read_text().splitlines()[1])["patch"]
    (tmp_path / "gold.patch").write_text(gold)
    task_id = "inflection__inflection-2"
    result = rlguard(
        tmp_path,
        "grade",
        "--suite",
        "minibyname",
        "--task",
        task_id,
        "--patch",
        str(tmp_path / "gold.patch"),
        "--json",
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert (out["reward"], out["resolved"], out["reason"], out["mode"]) == (1.0, True, "graded", "pytest")
    assert len(out["tests"]) == 456 and set(out["tests"].values()) == {"passed"}
    # a final workspace directory with a forcing conftest: not resolved, and the review says why
    (task,) = [t for t in load_suite(mini_suite) if t.task_id == task_id]
    workspace = tmp_path / "ws"
    shutil.copytree(task.workspace_dir, workspace)
    (workspace / "conftest.py").write_text(
        "import pytest\n\n\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n"
        "    outcome = yield\n    outcome.get_result().outcome = 'passed'\n"
    )
    result = rlguard(
        tmp_path,
        "grade",
        "--suite",
        str(mini_suite),
        "--task",
        task_id,
        "--workspace",
        str(workspace),
        "--json",
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["reward"] == 0.0 and out["resolved"] is False and out["reason"] == "tampering"
    assert out["tests"]["test_inflection.py::test_underscore_replaces_dashes"] == "failed"
    assert out["patch_review"]["findings"][0]["rule_id"] == "grader_tampering.report_hooks"
    missing = rlguard(tmp_path, "grade", "--suite", "minibyname", "--task", task_id)
    assert missing.returncode == 2 and "exactly one of --workspace DIR and --patch FILE" in missing.stderr


def test_grade_accepts_an_empty_patch(mini_suite, tmp_path):
    """An empty diff is the untouched workspace: graded (unresolved), not refused by ``git apply``."""
    (tmp_path / "empty.patch").write_text("")
    result = rlguard(
        tmp_path,
        "grade",
        "--suite",
        str(mini_suite),
        "--task",
        "inflection__inflection-1",
        "--patch",
        str(tmp_path / "empty.patch"),
        "--json",
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert (out["reward"], out["resolved"], out["reason"]) == (0.0, False, "graded")
    assert out["tests"]["test_inflection.py::test_parameterize_strips_separators_at_both_ends"] == "failed"
