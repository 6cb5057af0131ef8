"""The ``pytest`` grading mode: the project's own tests, run as its developers run them (SWE-bench),
watched from outside the code under test's reach.

Why each step exists:

* **fresh container over the final workspace**, with test files and test infrastructure restored
  and start-up hooks dropped (``pytest_workspace``): an edited, skipped or deleted test, a forcing
  ``conftest.py``, ``addopts`` that deselect, a ``.pth`` or ``sitecustomize`` are gone first;
* **two uids** (``supervised_tree``): the restored tests, the test configuration and the grader's
  files belong to the supervisor's uid and are read-only for the agent's, which runs the tests;
  nothing the code under test does at run time rewrites a test, plants bytecode or edits the grader;
* **a supervisor outside the test process** (``inside/supervisor.py``): non-dumpable, it starts the
  test process exactly once under a seccomp filter that hands it every ``exec``, reads results from a
  socket that names each sender's pid, and holds the only channel back to the host; a second start,
  an ``exec`` of the test process, a record from another process: zero (``pytest_score``);
* **a monitor inside it** (``inside/monitor.py``): an audit hook installed before any workspace
  import records what run-time cheats need (frames, test sources, the heap, tracing, ctypes, test
  framework patches, writes to the test side), judged against the task's baseline
  (``monitor_policy``);
* **a second opinion** (``second_opinion``): the FAIL_TO_PASS tests and a sample of PASS_TO_PASS run
  again in ``isolated`` mode, where workspace code sits behind proxies in another process and reaches
  neither the test frames nor the results; passing here and failing there scores zero;
* **bounded I/O**: the result is capped before compression and inflated with a limit; archives,
  diffs and scoring run in worker threads, off the event loop;
* **the final patch** (diff against the base) and the changed files go to the guard's review.

What this mode still cannot stop is in docs/grading.md.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import shlex
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sandbox.base import SandboxError, SandboxSpec
from tasks.errors import TaskError
from tasks.grading.patch import workspace_changes, workspace_patch
from tasks.grading.pytest_score import Observed, read_output, score
from tasks.grading.pytest_workspace import added_modules, grading_workspace_tar, pristine_members
from tasks.grading.result import GradeResult
from tasks.grading.supervised_tree import restored_files, split_graded_workspace

if TYPE_CHECKING:
    from sandbox.base import Sandbox, SandboxBackend
    from sandbox.settings import SandboxLimits
    from tasks.spec import Task

log = logging.getLogger(__name__)

# The grading container's exec output cap: the whole compressed result comes back in one answer.
REPORT_CAP_BYTES = 16 * 1024 * 1024
_HOST_TIMEOUT_MARGIN_S = 20.0
_INSIDE = Path(__file__).resolve().parent / "inside"
#: The grader's files in the container (name there -> source here).
GRADER_FILES = {
    "supervisor.py": _INSIDE / "supervisor.py",
    "exec_guard.py": _INSIDE / "exec_guard.py",
    "launcher.py": _INSIDE / "pytest_launcher.py",
    "grading_monitor.py": _INSIDE / "monitor.py",
}


@dataclass(frozen=True)
class Prepared:
    """Everything one grading needs, built on the host before any container starts."""

    tree: Any
    added: list[str]
    patch: str
    patch_truncated: bool
    changes: tuple[Any, ...]
    grader_dir: str


def prepare(task: Task, workspace_tar: bytes, monitor: bool = True) -> Prepared:
    """Archives, the patch and the changed files (CPU work: called in a worker thread)."""
    pristine = pristine_members(task)
    graded_tar = grading_workspace_tar(task, workspace_tar, pristine)
    added = added_modules(task, graded_tar, pristine)
    grader_dir = f"/tmp/rlguard-grader-{secrets.token_hex(6)}"
    extra = task.protected_extra()
    launcher_config = {
        "workspace": "/workspace",
        "added_modules": added,
        "pythonpath": list(task.grading.pythonpath),
        "args": task.test_files(),
        "protected": restored_files(graded_tar, extra),
        "grader_dir": grader_dir,
        "monitor": monitor,
    }
    grader_files = {name: source.read_bytes() for name, source in GRADER_FILES.items()}
    grader_files["launcher.json"] = json.dumps(launcher_config).encode()
    tree = split_graded_workspace(graded_tar, extra, grader_dir, grader_files)
    base_tar = task.workspace_tar()
    patch, truncated = workspace_patch(base_tar, workspace_tar)
    changes = workspace_changes(base_tar, workspace_tar)
    return Prepared(tree, added, patch, truncated, changes, grader_dir)


def run_command(task: Task, grader_dir: str, agent_tar: str, config: str) -> str:
    """Unpack the agent's files as the agent's uid, then start the supervisor in a clean environment."""
    g, archive = shlex.quote(grader_dir), shlex.quote(agent_tar)
    return (
        f"cd /workspace && umask 022 && tar -x --no-same-owner --no-overwrite-dir -f {archive} "
        f"&& rm -f {shlex.quote(agent_tar)} "
        f'&& exec env -i PATH="$PATH" HOME=/tmp LANG=C.UTF-8 python3 -I -S -B {g}/supervisor.py '
        f"{shlex.quote(config)}"
    )


async def grade_pytest(
    backend: SandboxBackend,
    task: Task,
    workspace_tar: bytes,
    *,
    image: str = "",
    limits: SandboxLimits | None = None,
    second_opinion: bool = True,
    monitor: bool = True,
    calibrating: bool = False,
) -> GradeResult:
    """Grade ``workspace_tar`` in a fresh supervised container and, with ``second_opinion``, the
    FAIL_TO_PASS tests and a sample of PASS_TO_PASS in ``isolated`` mode alongside; the monitor's
    findings are judged against the task's calibration (computed alongside the first time). The final
    patch and the changed files ride along for the guard's review. ``calibrating``: the raw run only
    (what ``tasks.grading.calibration`` records)."""
    from tasks.grading.calibration import ensure_calibration
    from tasks.grading.monitor_policy import judge_findings
    from tasks.grading.second_opinion import apply_opinion, isolated_opinion

    started = time.perf_counter()
    total = len(task.expected_test_ids())
    try:
        prepared = await asyncio.to_thread(prepare, task, workspace_tar, monitor)
    except TaskError as exc:
        details = {"task": task.id, "mode": "pytest", "reason": "bad workspace archive", "error": str(exc)}
        return GradeResult(0.0, 0, 0, total, total, {**details, "resolved": False, "tests": {}})
    jobs: list[Any] = [_supervised_run(backend, task, prepared, image, limits)]
    if not calibrating:
        jobs.append(ensure_calibration(backend, task, raw_run, image=image, limits=limits))
        if second_opinion:
            jobs.append(isolated_opinion(backend, task, workspace_tar, image=image, limits=limits))
    done = await _all(jobs)
    result = done[0]
    result.details["patch"] = prepared.patch
    result.details["patch_truncated"] = prepared.patch_truncated
    if not calibrating:
        calibration = done[1]
        if second_opinion:
            runnable = calibration.runnable if calibration.has_solution else None
            result = apply_opinion(task, result, done[2], runnable)
        result = judge_findings(task, result, calibration.baseline)
    result.details.setdefault("timings", {})["total_s"] = round(time.perf_counter() - started, 3)
    return replace(result, changes=prepared.changes)


async def raw_run(
    backend: SandboxBackend,
    task: Task,
    workspace_tar: bytes,
    *,
    image: str = "",
    limits: SandboxLimits | None = None,
) -> GradeResult:
    """One supervised run with the monitor, nothing judged: what a calibration records."""
    return await grade_pytest(backend, task, workspace_tar, image=image, limits=limits, calibrating=True)


async def _all(jobs: list[Any]) -> list[Any]:
    """Run ``jobs`` at once; on the first failure cancel the rest (no container is left behind:
    each job destroys its own)."""
    tasks = [asyncio.ensure_future(job) for job in jobs]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


async def _supervised_run(
    backend: SandboxBackend, task: Task, prepared: Prepared, image: str, limits: SandboxLimits | None
) -> GradeResult:
    base_limits = task.sandbox_limits(limits)
    grading_limits = base_limits.model_copy(
        update={"output_cap_bytes": max(base_limits.output_cap_bytes, REPORT_CAP_BYTES)}
    )
    spec = SandboxSpec(image=task.resolved_image(image), limits=grading_limits, supervised=True)
    timings: dict[str, float] = {}
    started = time.perf_counter()
    sandbox = await backend.create(spec)
    timings["create_s"] = round(time.perf_counter() - started, 3)
    try:
        output, timed_out = await _run_in(sandbox, task, prepared, timings)
    finally:
        try:
            await asyncio.shield(sandbox.destroy())
        except SandboxError:
            log.exception("could not destroy grading sandbox %s", sandbox.id)
    result = await asyncio.to_thread(_judge, task, output, timed_out)
    result.details["timings"] = {**timings, "run_total_s": round(time.perf_counter() - started, 3)}
    return result


def _judge(task: Task, output: tuple[str, str] | str, timed_out: bool) -> GradeResult:
    if isinstance(output, str):  # the run never produced an answer to read
        return score(task, Observed(None, output, ""), timed_out)
    text, nonce = output
    return score(task, read_output(text, nonce), timed_out)


async def _run_in(
    sandbox: Sandbox, task: Task, prepared: Prepared, timings: dict[str, float]
) -> tuple[tuple[str, str] | str, bool]:
    """Load both archives, then run the supervisor; ``((output, nonce) | problem, timed_out)``."""
    loaded = time.perf_counter()
    await sandbox.load_supervisor_archive(prepared.tree.supervisor_archive)
    token = secrets.token_hex(8)
    nonce = secrets.token_hex(16)
    agent_tar, config_name = f".rlguard-workspace-{token}.tar", f".rlguard-supervisor-{token}.json"
    config = {
        "nonce": nonce,
        "timeout_s": task.grading.timeout_s,
        "launcher": f"{prepared.grader_dir}/launcher.py",
        "launcher_config": f"{prepared.grader_dir}/launcher.json",
    }
    await sandbox.write_file(agent_tar, prepared.tree.agent_archive)
    await sandbox.write_file(config_name, json.dumps(config).encode())
    timings["load_s"] = round(time.perf_counter() - loaded, 3)
    command = run_command(task, prepared.grader_dir, agent_tar, f"/workspace/{config_name}")
    try:
        run = await sandbox.exec(command, timeout_s=task.grading.timeout_s + _HOST_TIMEOUT_MARGIN_S)
    except SandboxError as exc:
        # Workspace code runs from here on and can break the sandbox's command channel: its fault.
        return f"grader run failed: {exc}", False
    timings["run_s"] = round(run.duration_ms / 1000, 3)
    if run.truncated:
        return "grader output over the cap", False
    return (run.output, nonce), run.timed_out
