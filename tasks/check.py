"""Whole-suite checks behind ``rlguard tasks check`` and ``rlguard bench grading``.

``check_suite``: every task's reference solution must score 1.0 and its untouched workspace less,
graded exactly as ``finish`` grades (a task that fails this would teach a policy nothing, or the
wrong thing), and the solution's patch must pass the guard's review (``review``, when given: a gold
patch the review calls tampering would score 0 in ``finish``).

``bench_grading``: ``pytest``-mode grading against plain pytest of the same test files in a
container of the same image, both timed from container start to removal.
"""

from __future__ import annotations

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
    review: Callable[[str], PatchReview] | None = None,
) -> dict[str, Any]:
    """One task: solution reward (must be 1.0), untouched reward (must be < 1.0), and why not."""
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
        verdict = review(patch)
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
    review: Callable[[str], PatchReview] | None = None,
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

    Runs alternate (grade, plain, grade, plain, ...) so a load change on the machine hits both.
    """
    chosen = [task for task in tasks if task.grading.mode == "pytest"]
    if not chosen:
        raise ValueError("no pytest-mode task in the suite to benchmark")
    grade_s: list[float] = []
    plain_s: list[float] = []
    per_task: dict[str, dict[str, float]] = {}
    for task in chosen:
        workspace = solution_workspace(task)
        restored = grading_workspace_tar(task, workspace)
        g, p = [], []
        for _ in range(repeats):
            started = time.perf_counter()
            await grade_task(backend, task, workspace, image=image, limits=limits)
            g.append(time.perf_counter() - started)
            _, seconds = await plain_pytest(backend, task, restored, junit=False, image=image, limits=limits)
            p.append(seconds)
        per_task[task.id] = {"grade_s": statistics.median(g), "plain_pytest_s": statistics.median(p)}
        grade_s.append(statistics.median(g))
        plain_s.append(statistics.median(p))
    grade_p50, plain_p50 = statistics.median(grade_s), statistics.median(plain_s)
    return {
        "tasks": len(chosen),
        "repeats": repeats,
        "grade_s_p50": round(grade_p50, 3),
        "plain_pytest_s_p50": round(plain_p50, 3),
        "grade_vs_plain": round(grade_p50 / plain_p50, 3),
        "per_task": {k: {n: round(v, 3) for n, v in d.items()} for k, d in per_task.items()},
    }
