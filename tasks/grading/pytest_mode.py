"""The ``pytest`` grading mode: the project's own tests, run as its developers run them (SWE-bench).

Why each step exists:

* **fresh container over the final workspace**, with test files and test infrastructure restored
  and start-up hooks dropped (``tasks.grading.pytest_workspace``): an edited, skipped or deleted
  test, a forcing ``conftest.py``, ``addopts`` that deselect, a ``.pth`` or ``sitecustomize`` that
  patches pytest are gone before anything runs;
* **clean interpreter**: ``env -i``, ``python3 -I`` (no ``PYTHONPATH``, no user site),
  ``PYTEST_DISABLE_PLUGIN_AUTOLOAD=1``; the image's own pytest plugins are loaded by name, so a
  plugin the agent declared never is (``inside/pytest_launcher.py``);
* **results from a report, not from output**: the grader's plugin is registered before any conftest
  or test module and writes one line per test to a file outside /workspace; the host reads it back
  whole (one exec, its output cap raised for the grading container), so a suite of thousands of
  tests loses nothing;
* **cross-checks**: the report must end with pytest's exit status and the launcher's, both equal to
  the process's; exit 0 with a failure in the report, or exit 1 with none, is inconsistent; an
  expected node id that is missing counts as not passed; a timeout scores zero;
* **the final patch** (diff against the base) goes into the details for the guard's review
  (``guard.review``, wired in the gateway's ``finish``).

What this mode cannot stop (workspace code runs in pytest's process) is in docs/grading.md.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import gzip
import io
import json
import logging
import secrets
import shlex
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sandbox.base import SandboxError, SandboxSpec
from tasks.errors import TaskError
from tasks.grading.patch import workspace_patch
from tasks.grading.pytest_workspace import added_modules, grading_workspace_tar, pristine_members

if TYPE_CHECKING:
    from sandbox.base import Sandbox, SandboxBackend
    from sandbox.settings import SandboxLimits
    from tasks.grading.grade import GradeResult
    from tasks.spec import Task

log = logging.getLogger(__name__)

OUTCOMES = ("passed", "failed", "error", "skipped")
MARKER = "RLGUARD-PYTEST"
# The grading container's exec output cap: the whole report comes back in one answer.
REPORT_CAP_BYTES = 16 * 1024 * 1024
LOG_TAIL_BYTES = 3000
_HOST_TIMEOUT_MARGIN_S = 20.0
_LAUNCHER = Path(__file__).resolve().parent / "inside" / "pytest_launcher.py"


@dataclass
class PytestReport:
    """What the report file said: per-test outcomes, exit records, collection errors, problems."""

    tests: dict[str, str] = field(default_factory=dict)
    collect_errors: list[dict[str, str]] = field(default_factory=list)
    exitstatus: int | None = None
    launcher_rc: int | None = None
    shadowing: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def parse_report(text: str) -> PytestReport:
    """The report's JSON lines; a line that is not one of the known records is a problem."""
    report = PytestReport()
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            report.problems.append("report line is not JSON")
            continue
        kind = record.get("kind") if isinstance(record, dict) else None
        if kind == "test" and isinstance(record.get("id"), str) and record.get("outcome") in OUTCOMES:
            report.tests[record["id"]] = record["outcome"]
        elif kind == "collect_error":
            report.collect_errors.append(
                {"id": str(record.get("id")), "message": str(record.get("message"))[:500]}
            )
        elif kind == "end" and isinstance(record.get("exitstatus"), int) and report.exitstatus is None:
            report.exitstatus = record["exitstatus"]
        elif kind == "shadow" and isinstance(record.get("modules"), list):
            report.shadowing = [str(m)[:100] for m in record["modules"][:50]]
        elif kind == "exit" and isinstance(record.get("rc"), int) and report.launcher_rc is None:
            report.launcher_rc = record["rc"]
        else:
            report.problems.append(f"unexpected report record {str(kind)[:40]!r}")
    return report


@dataclass(frozen=True)
class RunOutput:
    """The one exec's answer, split: the process's exit code, the report text, pytest's log tail."""

    rc: int | None
    report: str | None
    log_tail: str
    problem: str | None = None


def split_output(output: str, nonce: str) -> RunOutput:
    """Find the single ``RLGUARD-PYTEST <nonce> <rc> <base64 gzip report>`` trailer."""
    marker = f"\n{MARKER} {nonce} "
    if output.count(marker) != 1:
        return RunOutput(None, None, output[-LOG_TAIL_BYTES:], "grader produced no result")
    log_tail, trailer = output.split(marker)
    rc_text, _, payload = trailer.strip().partition(" ")
    try:
        rc = int(rc_text)
        report = gzip.decompress(base64.b64decode(payload, validate=True)).decode("utf-8", "replace")
    except (ValueError, binascii.Error, OSError, EOFError):
        return RunOutput(None, None, log_tail, "malformed grader result")
    return RunOutput(rc, report, log_tail)


def score(task: Task, run: RunOutput, timed_out: bool) -> GradeResult:
    """Reward and evidence from the run (see the module docstring for the cross-checks)."""
    from tasks.grading.grade import GradeResult

    ids = task.expected_test_ids()
    total = len(ids)
    base: dict[str, Any] = {
        "task": task.id,
        "mode": "pytest",
        "resolved": False,
        "pytest_tail": run.log_tail[-2000:],
    }

    def zero(reason: str, **extra: Any) -> GradeResult:
        tests = {nodeid: "error" for nodeid in ids}
        return GradeResult(0.0, 0, 0, total, total, {**base, "reason": reason, "tests": tests, **extra})

    if timed_out or run.rc in (124, 137):
        return zero("timeout", timeout_s=task.grading.timeout_s)
    if run.problem or run.report is None:
        return zero(run.problem or "grader produced no result")
    report = parse_report(run.report)
    if report.problems:
        return zero("malformed grader result", problems=report.problems[:20])
    if report.shadowing:
        return zero("workspace shadows installed modules", modules=report.shadowing)
    if report.launcher_rc is None or report.exitstatus is None:
        partial = {nodeid: report.tests.get(nodeid, "error") for nodeid in ids}
        return zero("pytest did not finish", process_rc=run.rc, partial_tests=partial)
    bad = [o for o in report.tests.values() if o in ("failed", "error")]
    if (
        not (run.rc == report.launcher_rc == report.exitstatus)
        or (run.rc == 0 and bad)
        or (run.rc == 1 and not bad)
    ):
        return zero(
            "inconsistent results",
            process_rc=run.rc,
            launcher_rc=report.launcher_rc,
            exitstatus=report.exitstatus,
        )
    tests = {nodeid: report.tests.get(nodeid, "error") for nodeid in ids}
    missing = [nodeid for nodeid in ids if nodeid not in report.tests]
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
        "pytest_exitstatus": report.exitstatus,
        "collect_errors": report.collect_errors[:20],
        "other_tests": len(set(report.tests) - set(ids)),
    }
    return GradeResult(reward, passed, total - passed - errors, errors, total, details)


def launcher_bundle(task: Task, grader_dir: str, added: list[str]) -> bytes:
    """What goes to the grader directory: the launcher and its config."""
    config = {
        "workspace": "/workspace",
        "added_modules": added,
        "pythonpath": list(task.grading.pythonpath),
        "report": f"{grader_dir}/report.jsonl",
        "args": task.test_files(),
    }
    files = {"launcher.py": _LAUNCHER.read_bytes(), "config.json": json.dumps(config).encode()}
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 1704067200
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def run_command(task: Task, nonce: str, grader_dir: str, staging: str) -> str:
    """Unpack, run the launcher under a deadline in a clean environment, print log tail + trailer."""
    g = shlex.quote(grader_dir)
    timeout = f"{task.grading.timeout_s:g}"
    return (
        f"mkdir -m 700 {g} && tar -x -f {shlex.quote(staging)} -C {g} && rm -f {shlex.quote(staging)} "
        f'&& cd /workspace && env -i PATH="$PATH" HOME=/tmp LANG=C.UTF-8 PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 '
        f"timeout -k 5 {timeout} python3 -I -B {g}/launcher.py {g}/config.json > {g}/pytest.log 2>&1; rc=$?; "
        f"tail -c {LOG_TAIL_BYTES} {g}/pytest.log; printf '\\n{MARKER} {nonce} %s ' \"$rc\"; "
        f"gzip -c {g}/report.jsonl 2>/dev/null | base64 -w0; echo"
    )


async def grade_pytest(
    backend: SandboxBackend,
    task: Task,
    workspace_tar: bytes,
    *,
    image: str = "",
    limits: SandboxLimits | None = None,
) -> GradeResult:
    """Grade ``workspace_tar`` in a fresh container; the final patch rides along in ``details``."""
    from tasks.grading.grade import GradeResult

    started = time.perf_counter()
    total = len(task.expected_test_ids())
    try:
        pristine = pristine_members(task)
        graded_tar = grading_workspace_tar(task, workspace_tar, pristine)
        added = added_modules(task, graded_tar, pristine)
        patch, patch_truncated = workspace_patch(task.workspace_tar(), workspace_tar)
    except TaskError as exc:
        details = {"task": task.id, "mode": "pytest", "reason": "bad workspace archive", "error": str(exc)}
        return GradeResult(0.0, 0, 0, total, total, {**details, "resolved": False, "tests": {}})
    nonce = secrets.token_hex(16)
    grader_dir = f"/tmp/rlguard-grader-{secrets.token_hex(6)}"
    base_limits = task.sandbox_limits(limits)
    grading_limits = base_limits.model_copy(
        update={"output_cap_bytes": max(base_limits.output_cap_bytes, REPORT_CAP_BYTES)}
    )
    spec = SandboxSpec(
        image=task.resolved_image(image), limits=grading_limits, episode_id=None, workspace=graded_tar
    )
    timings: dict[str, float] = {}
    sandbox = await backend.create(spec)
    timings["create_s"] = round(time.perf_counter() - started, 3)
    try:
        output, timed_out = await _run_in(sandbox, task, nonce, grader_dir, added, timings)
    finally:
        try:
            await asyncio.shield(sandbox.destroy())
        except SandboxError:
            log.exception("could not destroy grading sandbox %s", sandbox.id)
    result = score(task, split_output(output, nonce), timed_out)
    result.details["patch"] = patch
    result.details["patch_truncated"] = patch_truncated
    result.details["timings"] = {**timings, "total_s": round(time.perf_counter() - started, 3)}
    return result


async def _run_in(
    sandbox: Sandbox, task: Task, nonce: str, grader_dir: str, added: list[str], timings: dict[str, float]
) -> tuple[str, bool]:
    staging = f".rlguard-grader-{secrets.token_hex(8)}.tar"
    await sandbox.write_file(staging, launcher_bundle(task, grader_dir, added))
    command = run_command(task, nonce, grader_dir, f"/workspace/{staging}")
    try:
        run = await sandbox.exec(command, timeout_s=task.grading.timeout_s + _HOST_TIMEOUT_MARGIN_S)
    except SandboxError as exc:
        # Workspace code runs from here on and can break the sandbox's command channel: its fault.
        return f"grader run failed: {exc}", False
    timings["run_s"] = round(run.duration_ms / 1000, 3)
    if run.truncated:
        return "grader output over the cap", False
    return run.output, run.timed_out
