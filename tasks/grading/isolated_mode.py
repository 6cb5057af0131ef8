"""The ``isolated`` grading mode: authored hidden tests, workspace code only behind proxies.

The grader itself is ``rollout.grading`` (see docs/grading.md); this module registers it as a mode.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlguard.errors import RlguardError
from tasks.grading.modes import register_grading_mode

if TYPE_CHECKING:
    from rollout.grading import GradeResult
    from rollout.tasks import Task
    from sandbox.base import SandboxBackend
    from sandbox.settings import SandboxLimits


@register_grading_mode("isolated")
class IsolatedMode:
    """Hidden tests in ``hidden/`` run by the trusted runner; the workspace answers through proxies."""

    def validate(self, task: Task) -> None:
        if not task.hidden_dir.is_dir() or not any(task.hidden_dir.rglob("test_*.py")):
            raise RlguardError(f"{task.root}: hidden/ must hold at least one test_*.py file")

    async def grade(
        self,
        backend: SandboxBackend,
        task: Task,
        workspace_tar: bytes,
        *,
        limits: SandboxLimits | None = None,
    ) -> GradeResult:
        from rollout.grading import grade

        return await grade(backend, task, workspace_tar, limits=limits)
