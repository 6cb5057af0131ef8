"""The ``isolated`` grading mode: the final workspace and the pristine hidden tests meet in a fresh
sandbox, and workspace code never runs in the process that decides outcomes.

Why each step exists:

* **fresh sandbox**: nothing the agent started (daemons, files in /tmp) survives into grading;
* **visible tests restored** (``grading.restore``, default ``tests``): deleted, emptied or weakened
  test files come back from the pristine task copy before anything runs;
* **hidden tests only now**: they enter a container for the first time, after the agent is done;
* **workspace code never runs in the process that decides outcomes**: the trusted runner
  (``tasks/grading/inside/runner.py``, non-dumpable, isolated interpreter, the grader's own ini, no
  conftest, no plugin autoload) runs pytest; workspace modules are proxies to an untrusted worker
  process that only returns plain data or handles (``inside/remote.py``, ``inside/worker.py``);
* **only nonce-tagged lines count**: the runner prints one line per test and a summary on its own
  stdout, which the worker cannot reach, through an exec whose output cap is raised to the
  largest the sandbox allows (a truncated stream scores zero, never a silently shorter list); the
  host demands exactly the hidden tests that ``pytest --collect-only`` counted over the pristine
  task when the suite was loaded: missing ones fail, unknown, duplicate or malformed lines score
  zero;
* **the grading container is destroyed** in every case, errors included.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import secrets
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from sandbox.base import SandboxBackend, SandboxError, SandboxSpec
from sandbox.settings import SandboxLimits
from tasks.archive import tar_of_files
from tasks.collect import GRADER_INI, INSIDE_FILES, RESULT_PREFIX, expected_test_ids, hidden_files
from tasks.errors import TaskError
from tasks.grading.result import GradeResult
from tasks.safefiles import is_real_dir
from tasks.spec import Task

__all__ = ["GradeResult", "check_task", "expected_test_ids", "grade", "score"]

log = logging.getLogger(__name__)

GRADER_ROOT = "/tmp/grader"
WORKSPACE = "/workspace"
MAX_GRADING_WORKSPACE_BYTES = 256 * 1024 * 1024
# The grader's exec keeps this much output: one line per test (node id + a 300-character message)
# fits ~60,000 tests; a stream cut anyway scores zero instead of losing results silently.
GRADER_OUTPUT_CAP_BYTES = 64 * 1024 * 1024
# Beyond the runner's own deadline: interpreter start, pytest's collection and the answer's way back.
_HOST_TIMEOUT_MARGIN_S = 20.0
# One call into workspace code may take this long before its test fails (the grading deadline
# still bounds the whole run).
MAX_CALL_TIMEOUT_S = 30.0
OUTCOMES = ("passed", "failed", "error", "skipped")
MESSAGE_CHARS = 500


def check_task(task: Task) -> list[str]:
    """What loading a suite asks of an isolated-mode task: its hidden tests count, or a clear error."""
    return expected_test_ids(task.hidden_dir, task.workspace_dir)


# ------------------------------------------------------------------------------------ archives
def _under(name: str, prefixes: list[str]) -> bool:
    return any(name == prefix or name.startswith(prefix + "/") for prefix in prefixes)


def _clean_name(name: str) -> str | None:
    """A member name relative to /workspace, or None when it points outside it."""
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts:
        return None
    parts = [part for part in path.parts if part != "."]
    return "/".join(parts) or None


def grading_workspace_tar(task: Task, final_workspace_tar: bytes) -> bytes:
    """The agent's final workspace with the task's ``grading.restore`` paths put back as shipped."""
    restore = [p.strip("/") for p in task.grading.restore]
    out = io.BytesIO()
    total = 0
    with tarfile.open(fileobj=out, mode="w") as dst:
        try:
            src = tarfile.open(fileobj=io.BytesIO(final_workspace_tar))  # noqa: SIM115 (closed below)
        except tarfile.TarError as exc:
            raise TaskError(f"final workspace is not a tar archive: {exc}") from exc
        with src:
            for member in src:
                name = _clean_name(member.name)
                if name is None or _under(name, restore):
                    continue
                if not (member.isfile() or member.isdir() or member.issym()):
                    continue  # devices, fifos and hard links have no business in a graded workspace
                total += member.size
                if total > MAX_GRADING_WORKSPACE_BYTES:
                    raise TaskError(f"final workspace is over {MAX_GRADING_WORKSPACE_BYTES} bytes")
                member.name = name
                dst.addfile(member, src.extractfile(member) if member.isfile() else None)
        with tarfile.open(fileobj=io.BytesIO(task.workspace_tar())) as pristine:
            for member in pristine:
                name = _clean_name(member.name)
                if name is not None and _under(name, restore):
                    dst.addfile(member, pristine.extractfile(member) if member.isfile() else None)
    return out.getvalue()


def pristine_names(workspace_dir: Path) -> list[str]:
    """Top-level module names of the pristine workspace (and its ``src/``): the code under test.

    The runner lets a workspace name shadow a package of the image only when it is one of these.
    """
    names = set()
    for root in ("src", ""):
        if root and not is_real_dir(workspace_dir, root):
            continue
        for entry in os.scandir(workspace_dir / root):  # lstat only: nothing is read through a link
            path = Path(entry.name)
            if entry.is_dir(follow_symlinks=False):
                names.add(entry.name)
            elif path.suffix == ".py":
                names.add(path.stem)
    return sorted(name for name in names if name.isidentifier())


def _grader_test_path(arg: str) -> str:
    return f"{GRADER_ROOT}/tests" + arg.removeprefix("/grader")


def grader_bundle(task: Task, nonce: str) -> bytes:
    """What goes to ``/tmp/grader``: trusted runner, remote-import library, ini, hidden tests, config."""
    config = {
        "nonce": nonce,
        "tests": [_grader_test_path(arg) for arg in task.grading.command[1:] or ["/grader"]],
        "ini": f"{GRADER_ROOT}/pytest.ini",
        "rootdir": f"{GRADER_ROOT}/tests",
        "lib": f"{GRADER_ROOT}/lib",
        "workspace": WORKSPACE,
        "pristine": pristine_names(task.workspace_dir),
        "timeout_s": task.grading.timeout_s,
        "call_timeout_s": min(MAX_CALL_TIMEOUT_S, task.grading.timeout_s),
    }
    files: dict[str, bytes] = {
        **{name: source.read_bytes() for name, source in INSIDE_FILES.items()},
        "pytest.ini": GRADER_INI.encode(),
        "config.json": json.dumps(config).encode(),
        **hidden_files(task.hidden_dir),
    }
    return tar_of_files(files)


# ------------------------------------------------------------------------------------- scoring
@dataclass
class RunnerReport:
    """What the trusted runner said, read from the nonce-tagged lines of its output only."""

    tests: dict[str, dict[str, str]] = field(default_factory=dict)
    summary: dict[str, Any] | None = None
    problems: list[str] = field(default_factory=list)
    collected: list[str] = field(default_factory=list)  # in collection order, before any workspace code


def parse_runner_output(output: str, nonce: str) -> RunnerReport:
    """The runner's per-test and summary lines carrying this grading's nonce; others are ignored.

    A tagged line can only come from the trusted runner, so anything wrong with one (bad JSON, an
    unknown kind or outcome, a test reported twice, a second summary) is a grader fault and
    recorded as a problem, which scores zero rather than guessing.
    """
    marker = f"{RESULT_PREFIX} {nonce} "
    report = RunnerReport()
    for line in output.splitlines():
        if not line.startswith(marker):
            continue
        try:
            record = json.loads(line[len(marker) :])
        except ValueError:
            report.problems.append("result line is not JSON")
            continue
        kind = record.get("kind") if isinstance(record, dict) else None
        if kind == "test":
            nodeid, outcome = record.get("id"), record.get("outcome")
            if not isinstance(nodeid, str) or outcome not in OUTCOMES:
                report.problems.append("malformed test line")
            elif nodeid in report.tests:
                report.problems.append(f"test reported twice: {nodeid[:200]}")
            else:
                report.tests[nodeid] = {"outcome": outcome, "message": str(record.get("message", ""))}
        elif kind == "collected" and isinstance(record.get("id"), str):
            report.collected.append(record["id"])
        elif kind == "summary" and report.summary is None:
            report.summary = record
        else:
            report.problems.append(f"unexpected result line kind {str(kind)[:40]!r}")
    return report


def _by_file(nodeids: list[str]) -> dict[str, list[str]]:
    files: dict[str, list[str]] = {}
    for nodeid in nodeids:
        files.setdefault(nodeid.split("::", 1)[0], []).append(nodeid)
    return files


def align(expected: list[str], collected: list[str]) -> dict[str, str] | None:
    """The grading container's node ids mapped onto those counted at load time, file by file.

    Both come from pytest collecting the same pristine files in the same order, but the image's
    pytest may spell a parametrized id differently (duplicates: ``x0`` in pytest 7, ``x_0`` in
    pytest 8+), so a file collected in full maps position by position. A file the container could
    not collect (the workspace lacks a module it imports) is simply absent: its tests are missing.
    A file collected with another count, or one the host never counted, maps to nothing: None.
    """
    counted = _by_file(expected)
    names: dict[str, str] = {}
    for path, ids in _by_file(collected).items():
        if len(counted.get(path, ())) != len(ids):
            return None
        names.update(zip(ids, counted[path], strict=True))
    return names


def _zero(task: Task, total: int, reason: str, **details: Any) -> GradeResult:
    return GradeResult(0.0, 0, total, 0, total, {"task": task.id, "reason": reason, **details})


def score(task: Task, expected: list[str], report: RunnerReport, output: str = "") -> GradeResult:
    """Reward from the runner's report: exactly the hidden tests counted on the host, each once."""
    total = len(expected)
    tail = output[-2000:]
    if report.problems:
        return _zero(task, total, "malformed grader result", problems=report.problems[:20], output_tail=tail)
    if report.summary is None:
        return _zero(task, total, "grader produced no result", output_tail=tail)
    if report.summary.get("timed_out"):
        return _zero(task, total, "timeout", timeout_s=task.grading.timeout_s, output_tail=tail)
    names = align(expected, report.collected)
    if names is None:
        return _zero(task, total, "inconsistent results", collected=report.collected[:20], output_tail=tail)
    tests = {names.get(nodeid, nodeid): test for nodeid, test in report.tests.items()}
    unknown = sorted(set(tests) - set(expected))
    if unknown:
        return _zero(task, total, "inconsistent results", unknown_tests=unknown[:20], output_tail=tail)
    report = RunnerReport(tests, report.summary, report.problems, report.collected)
    outcomes = {nodeid: report.tests.get(nodeid, {"outcome": "missing"})["outcome"] for nodeid in expected}
    passed = sum(outcome == "passed" for outcome in outcomes.values())
    errors = sum(outcome == "error" for outcome in outcomes.values())
    all_passed = 1.0 if passed == total else 0.0
    reward = all_passed if task.grading.reward == "all_or_nothing" else passed / total
    worker = report.summary.get("worker")
    details: dict[str, Any] = {
        "task": task.id,
        "reason": "graded",
        "tests": outcomes,
        "messages": {
            nodeid: report.tests[nodeid]["message"][:MESSAGE_CHARS]
            for nodeid, outcome in outcomes.items()
            if outcome not in ("passed", "missing")
        },
        "pytest_exitstatus": report.summary.get("exitstatus"),
        "collect_errors": report.summary.get("collect_errors") or [],
        "worker": worker if isinstance(worker, dict) else None,
        "pytest_tail": str(report.summary.get("pytest_tail", ""))[-2000:],
        "output_tail": tail,
    }
    return GradeResult(reward, passed, total - passed - errors, errors, total, details)


# ------------------------------------------------------------------------------------- grading
async def grade(
    backend: SandboxBackend,
    task: Task,
    workspace_tar: bytes,
    *,
    image: str = "",
    limits: SandboxLimits | None = None,
) -> GradeResult:
    """Grade ``workspace_tar`` (the agent's final /workspace) with ``task``'s hidden tests.

    ``image`` and ``limits`` are the configured sandbox image and base limits (the task's own image
    and overrides win; default: the built-in ones).

    Never raises for anything the agent controls: a broken workspace, a crash, a hang or tampering
    all come back as a low reward with the reason in ``details``. Infrastructure failures (no engine,
    no image) raise ``SandboxError`` so the caller can retry instead of recording a wrong reward.
    """
    started = time.perf_counter()
    # archives, test counting and scoring are CPU work: off the event loop (a gateway serves others)
    expected = await asyncio.to_thread(check_task, task)
    try:
        graded_tar = await asyncio.to_thread(grading_workspace_tar, task, workspace_tar)
    except TaskError as exc:
        return _zero(task, len(expected), "bad workspace archive", error=str(exc))
    nonce = secrets.token_hex(16)
    bundle = await asyncio.to_thread(grader_bundle, task, nonce)
    cap = {"output_cap_bytes": GRADER_OUTPUT_CAP_BYTES}
    grading_limits = task.sandbox_limits(limits).model_copy(update=cap)
    spec = SandboxSpec(
        image=task.resolved_image(image), limits=grading_limits, episode_id=None, workspace=graded_tar
    )
    timings: dict[str, float] = {}
    sandbox = await backend.create(spec)
    timings["create_s"] = round(time.perf_counter() - started, 3)
    try:
        result = await _run_in(sandbox, task, bundle, timings)
    finally:
        try:
            await asyncio.shield(sandbox.destroy())
        except SandboxError:
            log.exception("could not destroy grading sandbox %s", sandbox.id)
    if result is None:
        graded = _zero(task, len(expected), "timeout", timeout_s=task.grading.timeout_s)
    elif result is _TRUNCATED:
        graded = _zero(task, len(expected), "grader output truncated", cap_bytes=GRADER_OUTPUT_CAP_BYTES)
    else:
        report = await asyncio.to_thread(parse_runner_output, result, nonce)
        graded = score(task, expected, report, result)
    graded.details["timings"] = {**timings, "total_s": round(time.perf_counter() - started, 3)}
    return graded


async def _run_in(sandbox: Any, task: Task, bundle: bytes, timings: dict[str, float]) -> str | None:
    """Put the grader bundle in place and run it; the runner's output, or None on a host timeout."""
    staging = f".rlguard-grader-{secrets.token_hex(8)}.tar"
    await sandbox.write_file(staging, bundle)
    unpack = await sandbox.exec(
        f"mkdir -m 700 {GRADER_ROOT} && tar -x -f {staging} -C {GRADER_ROOT} && rm -f {staging}", timeout_s=30
    )
    timings["unpack_s"] = round(unpack.duration_ms / 1000, 3)
    if unpack.exit_code != 0:
        raise SandboxError(f"could not unpack the grader in the grading sandbox: {unpack.output[-500:]}")
    try:
        run = await sandbox.exec(
            f"exec python3 -I -S -B {GRADER_ROOT}/runner.py {GRADER_ROOT}/config.json",
            timeout_s=task.grading.timeout_s + _HOST_TIMEOUT_MARGIN_S,
        )
    except SandboxError as exc:
        # Workspace code runs from here on and can break the sandbox's command channel: its fault.
        return f"grader run failed: {exc}"
    timings["run_s"] = round(run.duration_ms / 1000, 3)
    if run.timed_out:
        return None
    if run.truncated:
        return _TRUNCATED
    return run.output


_TRUNCATED = "\0truncated"
