"""``pytest`` mode's judgement of what the supervisor saw (pure functions: no container needed).

Every zero the supervisor's view can cause is checked with its reason, and the result channel is
bounded: a payload over the cap or one that inflates past it is refused before it is held whole.
"""

from __future__ import annotations

import base64
import gzip
import json

import pytest
import yaml

from tasks.grading.pytest_score import (
    MAX_DECOMPRESSED_BYTES,
    MAX_PAYLOAD_CHARS,
    Observed,
    decode_payload,
    read_output,
    score,
)
from tasks.spec import Task, load_suite

NONCE = "ab" * 16
F2P = ["tests/test_x.py::test_new"]
P2P = ["tests/test_x.py::test_old"]


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> Task:
    root = tmp_path_factory.mktemp("score") / "suite"
    (root / "t" / "workspace" / "tests").mkdir(parents=True)
    (root / "t" / "workspace" / "tests" / "test_x.py").write_text("def test_old():\n    pass\n")
    spec = {
        "instructions": "fix",
        "grading": {
            "mode": "pytest",
            "reward": "all_or_nothing",
            "fail_to_pass": F2P,
            "pass_to_pass": P2P,
            "restore": [],
        },
    }
    (root / "t" / "task.yaml").write_text(yaml.safe_dump(spec))
    (loaded,) = load_suite(root)
    return loaded


def summary(records: list[dict], **extra) -> dict:
    base = {
        "exit": 0,
        "timed_out": False,
        "records": records,
        "over_cap": False,
        "bad_records": 0,
        "foreign_records": 0,
        "exec_guard": "kernel",
        "self_execs": 1,
        "execs_denied": 0,
        "lifeline_violation": False,
        "log_tail": "",
    }
    return {**base, **extra}


def run_records(outcome_new: str = "passed", rc: int = 0) -> list[dict]:
    ids = [*F2P, *P2P]
    return [
        {"kind": "start", "pid": 7},
        *({"kind": "collected", "id": n} for n in ids),
        {"kind": "test", "id": F2P[0], "outcome": outcome_new},
        {"kind": "test", "id": P2P[0], "outcome": "passed"},
        {"kind": "end", "exitstatus": rc},
        {"kind": "exit", "rc": rc, "counts": {}},
    ]


def encode(value: dict) -> str:
    return base64.b64encode(gzip.compress(json.dumps(value).encode())).decode()


def test_a_clean_run_is_resolved_and_a_failing_one_is_not(task):
    result = score(task, Observed(summary(run_records())), False)
    assert result.reward == 1.0 and result.details["reason"] == "graded" and result.details["resolved"]
    failing = score(task, Observed(summary(run_records("failed", 1), exit=1)), False)
    assert failing.reward == 0.0 and failing.details["reason"] == "graded"
    assert failing.details["fail_to_pass"] == {F2P[0]: "failed"}


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"execs_denied": 1}, "tried to exec itself"),
        ({"foreign_records": 3}, "another process"),
        ({"lifeline_violation": True}, "replaced itself or closed its life line"),
        ({"bad_records": 1}, "not JSON objects"),
    ],
)
def test_what_only_the_supervisor_sees_scores_zero_with_the_reason(task, change, fragment):
    result = score(task, Observed(summary(run_records(), **change)), False)
    assert result.reward == 0.0 and result.details["reason"] == "tampering (grader)"
    assert any(fragment in v for v in result.details["violations"]), result.details["violations"]


def test_a_second_start_and_records_after_the_exit_score_zero(task):
    twice = [{"kind": "start", "pid": 8}, *run_records()]
    result = score(task, Observed(summary(twice)), False)
    assert result.reward == 0.0 and "started 2 times" in result.details["violations"][0]
    late = [*run_records(), {"kind": "test", "id": F2P[0], "outcome": "passed"}]
    result = score(task, Observed(summary(late)), False)
    assert result.reward == 0.0 and any("after the exit record" in v for v in result.details["violations"])


def test_outcomes_must_match_the_collected_tests_one_for_one(task):
    duplicated = run_records()
    duplicated.insert(-2, {"kind": "test", "id": F2P[0], "outcome": "passed"})
    result = score(task, Observed(summary(duplicated)), False)
    assert result.details["reason"] == "report does not match the collected tests"
    uncollected = [r for r in run_records() if not (r["kind"] == "collected" and r["id"] == P2P[0])]
    result = score(task, Observed(summary(uncollected)), False)
    assert result.reward == 0.0 and result.details["unmatched"] == [P2P[0]]


def test_exit_codes_that_disagree_and_unfinished_runs_score_zero(task):
    result = score(task, Observed(summary(run_records("failed", 1), exit=0)), False)
    assert result.details["reason"] == "inconsistent results"
    unfinished = run_records()[:-2]
    result = score(task, Observed(summary(unfinished)), False)
    assert result.details["reason"] == "pytest did not finish"
    assert score(task, Observed(summary(run_records(), timed_out=True)), False).details["reason"] == "timeout"
    over = score(task, Observed(summary(run_records(), over_cap=True)), False)
    assert over.details["reason"] == "grader output over the cap"


def test_the_trailer_must_be_there_exactly_once():
    payload = encode(summary(run_records()))
    line = f"\nRLGUARD-PYTEST {NONCE} {payload}\n"
    assert read_output("log" + line, NONCE).summary is not None
    assert read_output("log" + line + line, NONCE).problem == "grader produced no result"
    assert read_output("log", NONCE).problem == "grader produced no result"
    assert (
        read_output(f"\nRLGUARD-PYTEST {'cd' * 16} {payload}\n", NONCE).problem == "grader produced no result"
    )
    assert read_output(f"\nRLGUARD-PYTEST {NONCE} %%%\n", NONCE).problem == "malformed grader result"


def test_the_payload_is_bounded_before_and_after_inflating():
    with pytest.raises(ValueError, match="over"):
        decode_payload("A" * (MAX_PAYLOAD_CHARS + 4))
    # 1 GiB of zeros compresses to ~1 MiB: inflating stops at the cap instead of holding it all
    bomb = gzip.compress(b"0" * (MAX_DECOMPRESSED_BYTES + 1024 * 1024), compresslevel=9)
    with pytest.raises(ValueError, match="inflates past"):
        decode_payload(base64.b64encode(bomb).decode())
    with pytest.raises(ValueError, match="not gzip"):
        decode_payload(base64.b64encode(b"not gzip at all").decode())


def test_findings_ride_along_as_evidence(task):
    records = run_records()
    finding = {
        "kind": "finding",
        "finding": "frame_access",
        "phase": F2P[0],
        "where": "pkg.py:3:f",
        "detail": "x",
    }
    records.insert(3, finding)
    result = score(task, Observed(summary(records)), False)
    assert result.reward == 1.0  # the policy decides (monitor_policy, review_policy)
    assert result.details["monitor"]["findings"][0]["finding"] == "frame_access"
