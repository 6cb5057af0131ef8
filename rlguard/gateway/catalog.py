"""The default task catalog and grading hook: ``rollout``'s task suites and tamper-proof grader."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlguard.gateway.tasks import GradeOutcome, TaskInfo, UnknownTaskError
from sandbox.base import SandboxBackend
from sandbox.settings import SandboxLimits
from tasks.errors import TaskError
from tasks.grading.modes import grade_task
from tasks.spec import TaskRegistry


class SuiteCatalog:
    """Tasks of the configured suites (``tasks.spec.TaskRegistry``), as the gateway sees them."""

    def __init__(self, suites: Sequence[str | Path], base_limits: SandboxLimits, image: str = "") -> None:
        self._registry = TaskRegistry(list(suites))
        self._base_limits = base_limits
        self._image = image
        self._infos: dict[str, TaskInfo] = {}

    def _info(self, task: Any) -> TaskInfo:
        info = self._infos.get(task.id)
        if info is None:
            info = self._infos[task.id] = TaskInfo(
                id=task.id,
                instructions=task.instructions,
                image=task.resolved_image(self._image),
                limits=task.sandbox_limits(self._base_limits),
                workspace=task.workspace_tar(),
                protected_paths=tuple(task.protected_paths),
                restored_paths=tuple(task.grading.restore),
                details={"horizon": task.horizon},
                source=task,
            )
        return info

    def list_tasks(self) -> list[TaskInfo]:
        return [self._info(task) for task in self._registry.list()]

    def resolve(self, ref: str) -> TaskInfo:
        if ref not in self._registry:
            raise UnknownTaskError(ref)
        try:
            return self._info(self._registry.get(ref))
        except TaskError as exc:
            raise UnknownTaskError(ref) from exc


async def grade_with_hidden_tests(
    backend: SandboxBackend, task: TaskInfo, workspace_tar: bytes
) -> GradeOutcome:
    """Grade with the task's own mode (``tasks.grading.modes``) in a fresh container."""
    result = await grade_task(backend, task.source, workspace_tar, image=task.image, limits=task.limits)
    return GradeOutcome(reward=float(result.reward), details=dict(result.details))
