"""Whole-suite checks behind ``rlguard tasks check`` and ``rlguard bench grading``.

``check_suite``: every task's reference solution must score 1.0 and its untouched workspace less,
graded exactly as ``finish`` grades (a task that fails this would teach a policy nothing, or the
wrong thing), and the solution's patch must pass the guard's review (``review``, when given: a gold
patch the review calls tampering would score 0 in ``finish``).

``bench_grading``: ``pytest``-mode grading against plain pytest of the same test files in a
container of the same image, both timed from container start to removal.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tasks.grading.baseline import plain_pytest
from tasks.grading.modes import grade_task
from tasks.grading.pytest_workspace import grading_workspace_tar
from tasks.workspaces import solution_workspace

if TYPE_CHECKING:
    from guard.review import PatchReview
    from sandbox.base import SandboxBackend
    from sandbox.settings import SandboxLimits
    from tasks.spec import Task


async def check_task(
    backend: SandboxBackend,
    task: Task,
    *,
    image: str = "",
    limits: SandboxLimits | None = None,
    review: Callable[[Any], PatchReview] | None = None,
) -> dict[str, Any]:
    """One task: solution reward (must be 1.0), untouched reward (must be < 1.0), and why not.

    ``review`` gets the solution's changed files (``GradeResult.changes``), or its patch text when
    the mode hands over none."""
    row: dict[str, Any] = {"task": task.id, "mode": task.grading.mode}
    if not task.solution_files():
        return {**row, "ok": False, "problem": "no solution/ to check"}
    solved = await grade_task(backend, task, solution_workspace(task), image=image, limits=limits)
    untouched = await grade_task(backend, task, task.workspace_tar(), image=image, limits=limits)
    row.update(solution_reward=solved.reward, untouched_reward=untouched.reward)
    problems = []
    if solved.reward != 1.0:
        failing = {k: v for k, v in (solved.details.get("tests") or {}).items() if v != "passed"}
        problems.append(
            f"solution scores {solved.reward} ({solved.details.get('reason')}; not passed: "
            f"{dict(list(failing.items())[:5])})"
        )
    if untouched.reward >= 1.0:
        problems.append("the untouched workspace already scores 1.0")
    patch = solved.details.get("patch")
    if review is not None and isinstance(patch, str):
        verdict = review(solved.changes if solved.changes is not None else patch)
        if verdict.tampering:
            rules = sorted({f.rule_id for f in verdict.findings})
            problems.append(f"the guard's review calls the solution's patch tampering ({', '.join(rules)})")
    return {**row, "ok": not problems, "problem": "; ".join(problems)}


async def check_suite(
    backend: SandboxBackend,
    tasks: list[Task],
    *,
    image: str = "",
    limits: SandboxLimits | None = None,
    review: Callable[[Any], PatchReview] | None = None,
) -> list[dict[str, Any]]:
    """``check_task`` for every task, in order."""
    return [await check_task(backend, task, image=image, limits=limits, review=review) for task in tasks]


async def bench_grading(
    backend: SandboxBackend,
    tasks: list[Task],
    *,
    repeats: int = 3,
    image: str = "",
    limits: SandboxLimits | None = None,
) -> dict[str, Any]:
    """Median wall time of grading the solution vs plain pytest over the same restored workspace.

    Per task and round, alternating so a load change on the machine hits all of them: grading with
    the monitor on (``grade_s``), with the monitor off (its overhead), with the isolated second
    opinion alongside (``second_opinion_s``), and plain pytest. The task's calibration is computed
    before the first timed run (once per task, not per grading).
    """
    from tasks.grading.calibration import ensure_calibration
    from tasks.grading.pytest_mode import grade_pytest, raw_run

    chosen = [task for task in tasks if task.grading.mode == "pytest"]
    if not chosen:
        raise ValueError("no pytest-mode task in the suite to benchmark")
    variants = {
        "grade_s": {"second_opinion": False, "monitor": True},
        "monitor_off_s": {"second_opinion": False, "monitor": False},
        "second_opinion_s": {"second_opinion": True, "monitor": True},
    }
    medians: dict[str, list[float]] = {name: [] for name in [*variants, "plain_pytest_s"]}
    per_task: dict[str, dict[str, float]] = {}
    for task in chosen:
        await ensure_calibration(backend, task, raw_run, image=image, limits=limits)
        workspace = solution_workspace(task)
        restored = grading_workspace_tar(task, workspace)
        runs: dict[str, list[float]] = {name: [] for name in medians}
        for _ in range(repeats):
            for name, flags in variants.items():
                started = time.perf_counter()
                await grade_pytest(backend, task, workspace, image=image, limits=limits, **flags)
                runs[name].append(time.perf_counter() - started)
            _, seconds = await plain_pytest(backend, task, restored, junit=False, image=image, limits=limits)
            runs["plain_pytest_s"].append(seconds)
        per_task[task.id] = {name: round(statistics.median(values), 3) for name, values in runs.items()}
        for name, values in runs.items():
            medians[name].append(statistics.median(values))
    p50 = {name: statistics.median(values) for name, values in medians.items()}
    return {
        "tasks": len(chosen),
        "repeats": repeats,
        "grade_s_p50": round(p50["grade_s"], 3),
        "plain_pytest_s_p50": round(p50["plain_pytest_s"], 3),
        "grade_vs_plain": round(p50["grade_s"] / p50["plain_pytest_s"], 3),
        "monitor_off_s_p50": round(p50["monitor_off_s"], 3),
        "monitor_overhead": round(p50["grade_s"] / p50["monitor_off_s"], 3),
        "second_opinion_s_p50": round(p50["second_opinion_s"], 3),
        "second_opinion_vs_plain": round(p50["second_opinion_s"] / p50["plain_pytest_s"], 3),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "per_task": per_task,
    }
