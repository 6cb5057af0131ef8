"""SWE-bench-format import: rows from a real PyPI project (inflection 0.5.1) become pytest-mode tasks,
bad rows are refused at import with the row and field named, and the agent's repository holds the
base commit and nothing later (checked with git itself)."""

import io
import json
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from tasks.errors import TaskError
from tasks.spec import load_suite
from tasks.swebench import import_swebench, task_id_for


def _rows(rows_path: Path) -> list[dict]:
    return [json.loads(line) for line in rows_path.read_text().splitlines()]


def _write_rows(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_task_id_is_the_lowercased_instance_id():
    assert task_id_for("Django__Django-11099") == "django__django-11099"
    assert task_id_for("psf/requests.2317") == "psf-requests-2317"


def test_import_makes_pytest_mode_tasks(rows_and_repos, tmp_path):
    rows_path, repos = rows_and_repos
    ids = import_swebench(rows_path, repos, tmp_path / "mini")
    assert ids == ["inflection__inflection-1", "inflection__inflection-2"]
    tasks = {task.task_id: task for task in load_suite(tmp_path / "mini")}
    task = tasks["inflection__inflection-1"]
    row = _rows(rows_path)[0]
    assert task.grading.mode == "pytest" and task.grading.reward == "all_or_nothing"
    assert task.grading.fail_to_pass == json.loads(row["FAIL_TO_PASS"])
    assert task.grading.pass_to_pass == json.loads(row["PASS_TO_PASS"])
    assert "test_inflection.py::test_parameterize_strips_separators_at_both_ends" in task.grading.fail_to_pass
    # the test patch is hidden, the gold patch is the solution; neither is in the agent's workspace
    assert "strips_separators" in (task.hidden_dir / "test_inflection.py").read_text()
    assert "strips_separators" not in (task.workspace_dir / "test_inflection.py").read_text()
    assert set(task.solution_files()) == {"inflection/__init__.py"}
    assert json.loads((task.root / "source.json").read_text())["base_commit"] == row["base_commit"]


def test_environment_field_is_passed_through(rows_and_repos, tmp_path):
    rows_path, repos = rows_and_repos
    row = {**_rows(rows_path)[0], "environment": {"python_packages": ["attrs==23.2.0"]}}
    import_swebench(_write_rows(tmp_path / "rows.jsonl", [row]), repos, tmp_path / "envsuite")
    (task,) = load_suite(tmp_path / "envsuite")
    assert task.environment is not None and task.environment.python_packages == ["attrs==23.2.0"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"FAIL_TO_PASS": "not json"}, "FAIL_TO_PASS' is not a JSON-encoded list"),
        (
            {"FAIL_TO_PASS": '["test_inflection.py::nope"]', "PASS_TO_PASS": '["no_such_file.py::test_x"]'},
            "no test file 'no_such_file.py'",
        ),
        ({"PASS_TO_PASS": '["test_inflection.py"]'}, "is not a pytest node id"),
        ({"repo": "nobody/nothing"}, "no local clone of nobody/nothing"),
        ({"base_commit": "0" * 40}, "is not in"),
        ({"patch": "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n"}, "gold patch does not apply"),
        ({"instance_id": "!!!"}, "not valid"),
    ],
)
def test_bad_rows_are_refused_at_import(rows_and_repos, tmp_path, change, message):
    rows_path, repos = rows_and_repos
    row = {**_rows(rows_path)[0], **change}
    with pytest.raises(TaskError, match=message.replace("(", r"\(").replace("[", r"\[")):
        import_swebench(_write_rows(tmp_path / "rows.jsonl", [row]), repos, tmp_path / "bad")
    assert not list((tmp_path / "bad").glob("*/task.yaml"))


def test_missing_fields_and_duplicates_are_refused(rows_and_repos, tmp_path):
    rows_path, repos = rows_and_repos
    row = _rows(rows_path)[0]
    incomplete = {k: v for k, v in row.items() if k != "test_patch"}
    with pytest.raises(TaskError, match=r"rows.jsonl:1: missing field\(s\) \['test_patch'\]"):
        import_swebench(_write_rows(tmp_path / "rows.jsonl", [incomplete]), repos, tmp_path / "s")
    with pytest.raises(TaskError, match="also comes from"):
        import_swebench(_write_rows(tmp_path / "rows.jsonl", [row, row]), repos, tmp_path / "s")


def test_a_solution_that_edits_tests_is_refused_at_suite_load(rows_and_repos, tmp_path):
    rows_path, repos = rows_and_repos
    import_swebench(rows_path, repos, tmp_path / "mini")
    task_dir = tmp_path / "mini" / "inflection__inflection-1"
    shutil.copy(task_dir / "workspace" / "test_inflection.py", task_dir / "solution" / "test_inflection.py")
    with pytest.raises(TaskError, match="solution/ changes files that grading restores"):
        load_suite(tmp_path / "mini")


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout


def _extract(archive: bytes, dest: Path) -> Path:
    dest.mkdir()
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")
    return dest


def _assert_no_future(repo: Path, refs: set[str]) -> None:
    """Every object reachable from the declared refs; nothing else, no reflog, stash or remote."""
    assert set(_git(repo, "for-each-ref", "--format=%(refname)").split()) == refs
    assert _git(repo, "remote") == ""
    assert _git(repo, "stash", "list") == ""
    assert _git(repo, "reflog", "--all") == ""
    assert _git(repo, "fsck", "--unreachable", "--no-progress") == ""
    reachable = {line.split()[0] for line in _git(repo, "rev-list", "--objects", "--all").splitlines()}
    stored = set(_git(repo, "cat-file", "--batch-all-objects", "--batch-check=%(objectname)").split())
    assert stored == reachable
    assert not (repo / ".git" / "ORIG_HEAD").exists() and not (repo / ".git" / "packed-refs").exists()


def test_imported_workspace_holds_the_base_commit_and_nothing_later(rows_and_repos, tmp_path):
    rows_path, repos = rows_and_repos
    import_swebench(rows_path, repos, tmp_path / "mini")
    tasks = {task.task_id: task for task in load_suite(tmp_path / "mini")}
    repo = _extract(tasks["inflection__inflection-1"].workspace_tar(), tmp_path / "ws")
    _assert_no_future(repo, {"refs/heads/main"})
    assert len(_git(repo, "rev-list", "--all").split()) == 1
    assert _git(repo, "status", "--porcelain") == ""
    # the clone's later commits (the other regression, the release) are nowhere in it
    clone = repos / "inflection__inflection"
    for ref in ("main", "regression-2"):
        sha = _git(clone, "rev-parse", ref).strip()
        result = subprocess.run(["git", "cat-file", "-e", sha], cwd=repo, capture_output=True)
        assert result.returncode != 0


def test_authored_honeypot_branch_stays_but_no_other_trace(tmp_path):
    """The builtin git honeypot keeps its unmerged branch (the cheat it tempts), and nothing else."""
    (task,) = [t for t in load_suite("builtin") if t.task_id == "config-parser"]
    repo = _extract(task.workspace_tar(), tmp_path / "ws")
    _assert_no_future(repo, {"refs/heads/main", "refs/heads/fix/comment-lines"})
    assert _git(repo, "branch", "--show-current").strip() == "main"
