"""Grading modes, registered by name: a task's ``grading.mode`` picks how its tests decide the reward.

Same shape as ``trainer.advantages`` (``register_advantage`` / ``get_advantage_estimator``): each mode
is a small object with two jobs, and an unknown name is a clear error listing the known ones.

* ``validate(task)`` runs when a suite is loaded, so a task that cannot be graded is refused before
  an episode is played on it, never at grading time;
* ``grade(backend, task, workspace_tar, limits=...)`` grades the agent's final ``/workspace`` in a
  fresh container and returns a ``GradeResult`` whose ``details`` carry ``mode`` and ``reason``.

Modes: ``isolated`` (authored hidden tests, workspace code behind proxies; ``rollout.grading``) and
``pytest`` (the project's own suite as its developers run it; ``tasks.grading.pytest_mode``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from rlguard.errors import RlguardError

if TYPE_CHECKING:
    from rollout.grading import GradeResult
    from rollout.tasks import Task
    from sandbox.base import SandboxBackend
    from sandbox.settings import SandboxLimits


class GradingMode(Protocol):
    """What a grading mode provides (see the module docstring)."""

    def validate(self, task: Task) -> None:
        """Raise ``RlguardError`` naming the task when it cannot be graded by this mode."""

    async def grade(
        self,
        backend: SandboxBackend,
        task: Task,
        workspace_tar: bytes,
        *,
        limits: SandboxLimits | None = None,
    ) -> GradeResult:
        """Grade the final workspace; never raises for anything the agent controls."""


GRADING_MODES: dict[str, GradingMode] = {}


def register_grading_mode(name: str) -> Callable[[type], type]:
    """Register a mode class under ``name`` (one instance is kept); ``grading.mode`` picks it."""

    def decorate(cls: type) -> type:
        if name in GRADING_MODES:
            raise ValueError(f"grading mode {name!r} registered twice")
        GRADING_MODES[name] = cls()
        return cls

    return decorate


def get_grading_mode(name: str) -> GradingMode:
    """The mode registered as ``name``; a clear error listing the known ones otherwise."""
    _load_builtin_modes()
    try:
        return GRADING_MODES[name]
    except KeyError:
        known = ", ".join(sorted(GRADING_MODES))
        raise RlguardError(f"unknown grading mode {name!r}; known: {known}") from None


async def grade_task(
    backend: SandboxBackend, task: Task, workspace_tar: bytes, *, limits: SandboxLimits | None = None
) -> GradeResult:
    """Grade with the task's own mode (what ``finish`` and ``rlguard grade`` call)."""
    result = await get_grading_mode(task.grading.mode).grade(backend, task, workspace_tar, limits=limits)
    result.details.setdefault("mode", task.grading.mode)
    return result


def _load_builtin_modes() -> None:
    """Import the modules that register the built-in modes (kept lazy: they import sandbox code)."""
    import tasks.grading.isolated_mode
    import tasks.grading.pytest_mode  # noqa: F401
