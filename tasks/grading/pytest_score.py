"""``pytest`` mode, the host's judgement of what the supervisor saw (pure functions, no container).

The supervisor (``inside/supervisor.py``) reports facts only it could see from outside the test
process (how many times the launcher started, ``exec`` attempts, records from other processes, the
life line, its exit code, the deadline) and the records the test process sent. This module decides:

* the supervisor's own findings first: no trailer, two trailers, a payload that does not decode within
  its cap, records over the cap: no result; a second start, an ``exec`` of the test process, a record
  from another process, a closed life line or records after the exit record: ``tampering (grader)``
  with what was seen;
* then the records: a module shadowing an installed one, a run that did not finish, exit codes that
  disagree with each other or with the outcomes, outcomes that do not match the collected tests one
  for one (a test reported twice, never collected, or never reported);
* then the score: ``resolved`` = every FAIL_TO_PASS and PASS_TO_PASS id passed.

The monitor's findings are passed through as evidence (``details["monitor"]``); what they do to the
reward is decided with the task's baseline (``tasks.grading.monitor_policy``) and the review policy.
"""

from __future__ import annotations

import base64
import binascii
import json
import zlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tasks.grading.result import GradeResult

if TYPE_CHECKING:
    from tasks.spec import Task

MARKER = "RLGUARD-PYTEST"
OUTCOMES = ("passed", "failed", "error", "skipped")
LOG_TAIL_CHARS = 2000
MAX_PAYLOAD_CHARS = 16 * 1024 * 1024
MAX_DECOMPRESSED_BYTES = 40 * 1024 * 1024
MAX_FINDINGS_KEPT = 100


@dataclass
class Observed:
    """The supervisor's summary, decoded, or the reason there is none."""

    summary: dict[str, Any] | None
    problem: str | None = None
    output_tail: str = ""


def decode_payload(payload: str) -> dict[str, Any]:
    """base64 of gzip of JSON, each step bounded: the payload's length before decoding, the JSON's
    after (``zlib`` with a ``max_length``; a bomb stops at the cap). ``ValueError`` when malformed or
    over a cap."""
    if len(payload) > MAX_PAYLOAD_CHARS:
        raise ValueError(f"grader result over {MAX_PAYLOAD_CHARS} characters")
    try:
        raw = base64.b64decode(payload, validate=True)
    except binascii.Error as exc:
        raise ValueError(f"grader result is not base64: {exc}") from exc
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        text = inflater.decompress(raw, MAX_DECOMPRESSED_BYTES)
    except zlib.error as exc:
        raise ValueError(f"grader result is not gzip: {exc}") from exc
    if inflater.unconsumed_tail:
        raise ValueError(f"grader result inflates past {MAX_DECOMPRESSED_BYTES} bytes")
    summary = json.loads(text)
    if not isinstance(summary, dict):
        raise ValueError("grader result is not a JSON object")
    return summary


def read_output(output: str, nonce: str) -> Observed:
    """The single ``RLGUARD-PYTEST <nonce> <payload>`` line of the run's output, decoded."""
    marker = f"\n{MARKER} {nonce} "
    if output.count(marker) != 1:
        return Observed(None, "grader produced no result", output[-LOG_TAIL_CHARS:])
    head, _, trailer = output.partition(marker)
    try:
        summary = decode_payload(trailer.strip())
    except ValueError as exc:
        return Observed(None, "malformed grader result", f"{exc}\n{head[-LOG_TAIL_CHARS:]}")
    return Observed(summary, None, head[-LOG_TAIL_CHARS:])


@dataclass
class Records:
    """The test process's records, sorted out."""

    starts: int = 0
    collected: list[str] = field(default_factory=list)
    tests: dict[str, str] = field(default_factory=dict)
    duplicates: list[str] = field(default_factory=list)
    collect_errors: list[dict[str, str]] = field(default_factory=list)
    findings: list[dict[str, str]] = field(default_factory=list)
    exitstatus: int | None = None
    launcher_rc: int | None = None
    counts: dict[str, int] = field(default_factory=dict)
    shadowing: list[str] = field(default_factory=list)
    after_exit: int = 0
    problems: list[str] = field(default_factory=list)


def sort_records(records: list[Any]) -> Records:
    """One pass over the records in arrival order; anything of an unknown shape is a problem."""
    out = Records()
    for record in records:
        kind = record.get("kind") if isinstance(record, dict) else None
        if out.launcher_rc is not None and kind != "finding":
            out.after_exit += 1
        if kind == "start":
            out.starts += 1
        elif kind == "collected" and isinstance(record.get("id"), str):
            out.collected.append(record["id"])
        elif kind == "test" and isinstance(record.get("id"), str) and record.get("outcome") in OUTCOMES:
            if record["id"] in out.tests:
                out.duplicates.append(record["id"])
            out.tests[record["id"]] = record["outcome"]
        elif kind == "collect_error":
            out.collect_errors.append(
                {"id": str(record.get("id"))[:500], "message": str(record.get("message"))[:500]}
            )
        elif kind == "finding":
            if len(out.findings) < MAX_FINDINGS_KEPT:
                out.findings.append(
                    {k: str(record.get(k, ""))[:300] for k in ("finding", "phase", "where", "detail")}
                )
        elif kind == "end" and isinstance(record.get("exitstatus"), int) and out.exitstatus is None:
            out.exitstatus = record["exitstatus"]
        elif kind == "shadow" and isinstance(record.get("modules"), list):
            out.shadowing = [str(m)[:100] for m in record["modules"][:50]]
        elif kind == "exit" and isinstance(record.get("rc"), int) and out.launcher_rc is None:
            out.launcher_rc = record["rc"]
            counts = record.get("counts")
            if isinstance(counts, dict):
                out.counts = {str(k)[:40]: int(v) for k, v in list(counts.items())[:40] if isinstance(v, int)}
        else:
            out.problems.append(f"unexpected record {str(kind)[:40]!r}")
    return out


def supervisor_violations(summary: dict[str, Any], records: Records) -> list[str]:
    """What only an outside observer could see: each is a reason to score zero."""
    found = []
    if records.starts != 1:
        found.append(f"the launcher started {records.starts} times (exactly one start per grading)")
    if summary.get("execs_denied"):
        found.append(f"the test process tried to exec itself {summary['execs_denied']} time(s)")
    if summary.get("foreign_records"):
        found.append(
            f"{summary['foreign_records']} record(s) came from another process than the test process"
        )
    if summary.get("lifeline_violation"):
        found.append("the test process replaced itself or closed its life line before finishing")
    if records.after_exit:
        found.append(f"{records.after_exit} record(s) after the exit record")
    if summary.get("bad_records"):
        found.append(f"{summary['bad_records']} record(s) were not JSON objects")
    return found


def score(task: Task, observed: Observed, timed_out: bool) -> GradeResult:
    """Reward and evidence (see the module docstring for the order of the checks)."""
    ids = task.expected_test_ids()
    total = len(ids)
    summary = observed.summary or {}
    records = sort_records(summary.get("records") or [])
    base: dict[str, Any] = {
        "task": task.id,
        "mode": "pytest",
        "resolved": False,
        "pytest_tail": str(summary.get("log_tail") or observed.output_tail)[-LOG_TAIL_CHARS:],
        "monitor": {"findings": records.findings, "counts": records.counts},
        "supervisor": {
            k: summary.get(k)
            for k in (
                "exit",
                "exec_guard",
                "self_execs",
                "execs_denied",
                "subprocess_execs",
                "record_bytes",
                "uncredentialed_records",
            )
        },
    }

    def zero(reason: str, **extra: Any) -> GradeResult:
        tests = {nodeid: "error" for nodeid in ids}
        return GradeResult(0.0, 0, 0, total, total, {**base, "reason": reason, "tests": tests, **extra})

    if timed_out or summary.get("timed_out"):
        return zero("timeout", timeout_s=task.grading.timeout_s)
    if observed.summary is None:
        return zero(observed.problem or "grader produced no result", output_tail=observed.output_tail)
    if summary.get("over_cap"):
        return zero("grader output over the cap")
    violations = supervisor_violations(summary, records)
    if violations:
        return zero("tampering (grader)", violations=violations)
    if records.problems:
        return zero("malformed grader result", problems=records.problems[:20])
    if records.shadowing:
        return zero("workspace shadows installed modules", modules=records.shadowing)
    rc = summary.get("exit")
    if records.launcher_rc is None or records.exitstatus is None:
        partial = {nodeid: records.tests.get(nodeid, "error") for nodeid in ids}
        return zero("pytest did not finish", process_rc=rc, partial_tests=partial)
    bad = [o for o in records.tests.values() if o in ("failed", "error")]
    if not (rc == records.launcher_rc == records.exitstatus) or (rc == 0 and bad) or (rc == 1 and not bad):
        return zero(
            "inconsistent results",
            process_rc=rc,
            launcher_rc=records.launcher_rc,
            exitstatus=records.exitstatus,
        )
    # Tests ran to the end (exit 0 or 1): every collected test has exactly one outcome, and only they do.
    unmatched = sorted(set(records.tests) ^ set(records.collected)) if rc in (0, 1) else []
    if records.duplicates or unmatched or len(records.collected) != len(set(records.collected)):
        return zero(
            "report does not match the collected tests",
            duplicates=records.duplicates[:20],
            unmatched=unmatched[:20],
        )
    tests = {nodeid: records.tests.get(nodeid, "error") for nodeid in ids}
    missing = [nodeid for nodeid in ids if nodeid not in records.tests]
    passed = sum(outcome == "passed" for outcome in tests.values())
    errors = sum(outcome == "error" for outcome in tests.values())
    resolved = passed == total
    reward = (1.0 if resolved else 0.0) if task.grading.reward == "all_or_nothing" else passed / total
    details = {
        **base,
        "reason": "graded",
        "resolved": resolved,
        "tests": tests,
        "missing": missing[:50],
        "fail_to_pass": {n: tests[n] for n in task.grading.fail_to_pass},
        "pass_to_pass_failed": [n for n in task.grading.pass_to_pass if tests[n] != "passed"][:50],
        "pytest_exitstatus": records.exitstatus,
        "collect_errors": records.collect_errors[:20],
        "other_tests": len(set(records.tests) - set(ids)),
    }
    return GradeResult(reward, passed, total - passed - errors, errors, total, details)
