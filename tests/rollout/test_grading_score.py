"""Grading logic that needs no container: counting hidden tests, archives, and the three-way scoring."""

import io
import json
import tarfile
from pathlib import Path

import pytest

from rlguard.errors import RlguardError
from rollout.grading import (
    expected_test_ids,
    grading_workspace_tar,
    junit_key,
    parse_runner_output,
    score,
)
from rollout.tasks import load_suite

TASK = next(task for task in load_suite("builtin") if task.task_id == "stats-median")
IDS = expected_test_ids(TASK.hidden_dir)


def runner_result(outcomes: dict[str, str], **overrides) -> dict:
    """What the in-container runner reports when every source agrees on ``outcomes``."""
    junit = [[*junit_key(nodeid), outcome, ""] for nodeid, outcome in outcomes.items()]
    reports = {
        nodeid: {"setup": ["passed", ""], "call": [outcome, ""], "teardown": ["passed", ""]}
        for nodeid, outcome in outcomes.items()
    }
    calls = {nodeid: [outcome != "passed"] for nodeid, outcome in outcomes.items()}
    events = {"collected": list(outcomes), "reports": reports, "calls": calls, "tamper": [], "finish": 0}
    result = {"returncode": 0, "timed_out": False, "junit": junit, "junit_error": None, "events": events}
    for key, value in overrides.items():
        if key in events:
            events[key] = value
        else:
            result[key] = value
    return result


def test_expected_ids_for_builtin_task():
    assert len(IDS) == 6
    assert all(nodeid.startswith("test_median.py::test_") for nodeid in IDS)


def test_expected_ids_classes_nested_and_duplicates(tmp_path: Path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "test_a.py").write_text(
        "def test_one(): pass\ndef test_one(): pass\ndef helper(): pass\n"
        "class TestThing:\n    def test_m(self): pass\n    def other(self): pass\n"
        "class Helper:\n    def test_not_collected(self): pass\n"
    )
    (tmp_path / "sub" / "test_b.py").write_text("async def test_async(): pass\n")
    (tmp_path / "conftest_like.py").write_text("def test_ignored(): pass\n")
    assert expected_test_ids(tmp_path) == [
        "sub/test_b.py::test_async",
        "test_a.py::test_one",
        "test_a.py::TestThing::test_m",
    ]


def test_parametrized_hidden_tests_are_refused(tmp_path: Path):
    (tmp_path / "test_p.py").write_text(
        "import pytest\n@pytest.mark.parametrize('x', [1, 2])\ndef test_p(x): pass\n"
    )
    with pytest.raises(RlguardError, match="parametrized"):
        expected_test_ids(tmp_path)


def test_junit_key_matches_pytest_mangling():
    assert junit_key("test_a.py::test_x") == ("test_a", "test_x")
    assert junit_key("sub/test_b.py::TestK::test_y") == ("sub.test_b.TestK", "test_y")


def test_all_sources_agree():
    outcomes = dict.fromkeys(IDS, "passed")
    outcomes[IDS[0]] = "failed"
    result = score(TASK, IDS, runner_result(outcomes))
    assert (result.reward, result.passed, result.failed, result.total) == (5 / 6, 5, 1, 6)
    assert result.details["reason"] == "graded"


def test_junit_pass_is_not_enough_when_the_call_raised():
    result = runner_result(dict.fromkeys(IDS, "passed"))
    result["events"]["calls"][IDS[1]] = [True]
    graded = score(TASK, IDS, result)
    assert graded.passed == 5 and graded.details["tests"][IDS[1]] == "failed"


def test_missing_results_count_as_failed():
    result = runner_result(dict.fromkeys(IDS[:4], "passed"), collected=IDS)
    graded = score(TASK, IDS, result)
    assert graded.passed == 4 and graded.failed == 2
    assert graded.details["tests"][IDS[5]] == "missing"


def test_extra_results_zero_the_reward():
    outcomes = dict.fromkeys(IDS, "passed")
    result = runner_result(outcomes)
    result["junit"].append(["test_median", "test_invented", "passed", ""])
    graded = score(TASK, IDS, result)
    assert graded.reward == 0.0 and graded.details["reason"] == "inconsistent results"


def test_duplicate_junit_case_is_not_a_pass():
    result = runner_result(dict.fromkeys(IDS, "passed"))
    result["junit"].append([*junit_key(IDS[0]), "passed", ""])
    assert score(TASK, IDS, result).details["tests"][IDS[0]] == "failed"


def test_collected_set_must_match():
    result = runner_result(dict.fromkeys(IDS, "passed"), collected=IDS[:3])
    assert score(TASK, IDS, result).reward == 0.0


def test_tampering_timeout_and_no_result_score_zero():
    tampered = runner_result(dict.fromkeys(IDS, "passed"), tamper=["time.time"])
    assert score(TASK, IDS, tampered).details["reason"] == "tampering"
    assert score(TASK, IDS, tampered).reward == 0.0
    timed_out = runner_result(dict.fromkeys(IDS, "passed"), timed_out=True)
    assert score(TASK, IDS, timed_out).details["reason"] == "timeout"
    nothing = score(TASK, IDS, None, output="garbage")
    assert nothing.reward == 0.0 and nothing.details["reason"] == "grader produced no result"


def test_unfinished_session_is_reported():
    graded = score(TASK, IDS, runner_result(dict.fromkeys(IDS, "passed"), finish=None))
    assert graded.details["reason"] == "incomplete run"


def test_all_or_nothing():
    strict = TASK.model_copy(update={"grading": TASK.grading.model_copy(update={"reward": "all_or_nothing"})})
    outcomes = dict.fromkeys(IDS, "passed")
    assert score(strict, IDS, runner_result(outcomes)).reward == 1.0
    outcomes[IDS[2]] = "failed"
    assert score(strict, IDS, runner_result(outcomes)).reward == 0.0


def test_result_line_needs_the_nonce():
    good = {"returncode": 0}
    output = "\n".join(
        [
            "RLGUARD-GRADE deadbeef " + json.dumps({"returncode": 99}),
            "noise",
            "RLGUARD-GRADE n0nce " + json.dumps(good),
            "RLGUARD-GRADE other " + json.dumps({"returncode": 7}),
        ]
    )
    assert parse_runner_output(output, "n0nce") == good
    assert parse_runner_output(output, "missing") is None
    assert parse_runner_output("RLGUARD-GRADE n0nce {broken", "n0nce") is None


def _tar(entries: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for info, data in entries:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return out.getvalue()


def _file(name: str, data: bytes) -> tuple[tarfile.TarInfo, bytes]:
    return tarfile.TarInfo(name), data


def test_grading_workspace_restores_tests_and_drops_escapes():
    fifo = tarfile.TarInfo("pipe")
    fifo.type = tarfile.FIFOTYPE
    agent = _tar(
        [
            _file("statskit/core.py", b"# agent version\n"),
            _file("tests/test_core.py", b"# emptied by the agent\n"),
            _file("tests/test_new.py", b"def test_added(): pass\n"),
            _file("../escape.py", b"x"),
            _file("/etc/evil", b"x"),
            (fifo, None),
        ]
    )
    with tarfile.open(fileobj=io.BytesIO(grading_workspace_tar(TASK, agent))) as tar:
        contents = {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}
        names = tar.getnames()
    assert contents["statskit/core.py"] == b"# agent version\n"
    assert contents["tests/test_core.py"] == (TASK.workspace_dir / "tests" / "test_core.py").read_bytes()
    assert "tests/test_new.py" not in contents  # the restored tests/ is exactly the pristine one
    assert not any("escape" in n or "evil" in n or n == "pipe" for n in names)


def test_grading_workspace_rejects_garbage():
    with pytest.raises(RlguardError, match="not a tar archive"):
        grading_workspace_tar(TASK, b"nope")


def test_malformed_runner_result_scores_zero():
    result = runner_result(dict.fromkeys(IDS, "passed"), collected=[1, "x", None])
    graded = score(TASK, IDS, result)
    assert graded.reward == 0.0 and graded.details["reason"] == "malformed grader result"
    result = runner_result(dict.fromkeys(IDS, "passed"))
    result["junit"] = [["only-one-field"]]
    assert score(TASK, IDS, result).details["reason"] == "malformed grader result"
