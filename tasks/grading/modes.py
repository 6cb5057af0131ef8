"""Grading modes, registered by name: a task's ``grading.mode`` picks how its tests decide the reward.

Same shape as ``trainer.advantages`` (``register_advantage`` / ``get_advantage_estimator``): a mode is
an async function ``grade(backend, task, workspace_tar, *, image, limits) -> GradeResult`` that
grades the agent's final ``/workspace`` in a fresh container and never raises for anything the agent
controls; an unknown name is a clear error listing the known ones. ``image`` is the configured
sandbox image (a task's own image wins), ``limits`` the base sandbox limits.

Built in: ``isolated`` (authored hidden tests, workspace code behind proxies; ``tasks.grading.grade``)
and ``pytest`` (the project's own suite as its developers run it; ``tasks.grading.pytest_mode``).
A task's mode-specific fields are checked when its suite loads (``tasks.spec``), not here, so a task
that cannot be graded is refused before an episode is played on it; a new mode therefore adds its
name to ``GradingSpec.mode`` (and its checks to the loader) as well as registering here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from tasks.errors import TaskError

if TYPE_CHECKING:
    from sandbox.base import SandboxBackend
    from sandbox.settings import SandboxLimits
    from tasks.grading.grade import GradeResult
    from tasks.spec import Task

GradeFn = Callable[..., Awaitable["GradeResult"]]
GRADING_MODES: dict[str, GradeFn] = {}


def register_grading_mode(name: str) -> Callable[[GradeFn], GradeFn]:
    """Register a grading function under ``name`` (a task's ``grading.mode`` picks it)."""

    def decorate(fn: GradeFn) -> GradeFn:
        if name in GRADING_MODES:
            raise ValueError(f"grading mode {name!r} registered twice")
        GRADING_MODES[name] = fn
        return fn

    return decorate


def get_grading_mode(name: str) -> GradeFn:
    """The grading function registered as ``name``; a clear error listing the known ones otherwise."""
    try:
        return GRADING_MODES[name]
    except KeyError:
        known = ", ".join(sorted(GRADING_MODES))
        raise TaskError(f"unknown grading mode {name!r}; known: {known}") from None


async def grade_task(
    backend: SandboxBackend,
    task: Task,
    workspace_tar: bytes,
    *,
    image: str = "",
    limits: SandboxLimits | None = None,
) -> GradeResult:
    """Grade with the task's own mode (what ``finish``, ``rlguard grade`` and ``tasks check`` call)."""
    result = await get_grading_mode(task.grading.mode)(
        backend, task, workspace_tar, image=image, limits=limits
    )
    result.details.setdefault("mode", task.grading.mode)
    return result


@register_grading_mode("isolated")
async def grade_isolated(
    backend: SandboxBackend,
    task: Task,
    workspace_tar: bytes,
    *,
    image: str = "",
    limits: SandboxLimits | None = None,
) -> GradeResult:
    """Hidden tests in ``hidden/`` run by the trusted runner; the workspace answers through proxies."""
    from tasks.grading.grade import grade

    return await grade(backend, task, workspace_tar, image=image, limits=limits)


@register_grading_mode("pytest")
async def grade_pytest(
    backend: SandboxBackend,
    task: Task,
    workspace_tar: bytes,
    *,
    image: str = "",
    limits: SandboxLimits | None = None,
) -> GradeResult:
    """The project's suite in-process over the restored workspace; resolved = every expected id passes."""
    from tasks.grading import pytest_mode

    return await pytest_mode.grade_pytest(backend, task, workspace_tar, image=image, limits=limits)
