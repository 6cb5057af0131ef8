"""Grading modes, registered by name: a task's ``grading.mode`` picks how its tests decide the reward.

``GRADING_MODES`` is a ``contract.registry.Registry``: a mode is an async function
``grade(backend, task, workspace_tar, *, image, limits) -> GradeResult`` that grades the agent's
final ``/workspace`` in a fresh container and never raises for anything the agent controls.
``image`` is the configured sandbox image (a task's own image wins), ``limits`` the base sandbox
limits. A task file's ``grading.mode`` is validated against the registered names when it loads
(``tasks.spec.GradingSpec``), so an unknown mode is one error listing the known ones.

Built in: ``isolated`` (authored hidden tests, workspace code behind proxies; ``tasks.grading.isolated``)
and ``pytest`` (the project's own suite as its developers run it; ``tasks.grading.pytest_mode``).
A task's mode-specific fields are checked when its suite loads (``tasks.spec``), not here, so a task
that cannot be graded is refused before an episode is played on it; a new mode therefore adds its
checks to the loader as well as registering here.

This module imports ``tasks.spec`` only for type checking and each mode's grader only when it
grades, so ``tasks.spec`` can import it to validate ``grading.mode`` with no cycle at run time (the
static edge is named in ``pyproject.toml``'s import-linter contract).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from contract.registry import Registry

if TYPE_CHECKING:
    from sandbox.base import SandboxBackend
    from sandbox.settings import SandboxLimits
    from tasks.grading.result import GradeResult
    from tasks.spec import Task

GradeFn = Callable[..., Awaitable["GradeResult"]]
GRADING_MODES: Registry[GradeFn] = Registry("grading mode")


async def grade_task(
    backend: SandboxBackend,
    task: Task,
    workspace_tar: bytes,
    *,
    image: str = "",
    limits: SandboxLimits | None = None,
) -> GradeResult:
    """Grade with the task's own mode (what ``finish``, ``rlguard grade`` and ``tasks check`` call)."""
    result = await GRADING_MODES.get(task.grading.mode)(
        backend, task, workspace_tar, image=image, limits=limits
    )
    result.details.setdefault("mode", task.grading.mode)
    return result


@GRADING_MODES.register("isolated")
async def grade_isolated(
    backend: SandboxBackend,
    task: Task,
    workspace_tar: bytes,
    *,
    image: str = "",
    limits: SandboxLimits | None = None,
) -> GradeResult:
    """Hidden tests in ``hidden/`` run by the trusted runner; the workspace answers through proxies."""
    from tasks.grading.isolated import grade

    return await grade(backend, task, workspace_tar, image=image, limits=limits)


@GRADING_MODES.register("pytest")
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
