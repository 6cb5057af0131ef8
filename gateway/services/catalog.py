"""What the gateway needs from tasks: a catalog to resolve ``<suite>/<id>`` and a grading hook,
and the default of each (the configured suites, graded in each task's own mode).

The gateway does not parse task suites or run graders itself (``tasks.spec`` and
``tasks.grading`` do); it depends on two small interfaces so it can be run, and tested, with any
catalog.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from gateway.errors import UnknownTaskError
from guard.types import Integrity
from sandbox.base import SandboxBackend
from sandbox.settings import SandboxLimits
from tasks.errors import TaskError
from tasks.grading.modes import grade_task
from tasks.spec import TaskRegistry
from tasks.suite_index import SuiteIndex


@dataclass(frozen=True)
class TaskInfo:
    """The parts of a task the gateway uses; ``source`` is the catalog's own task object."""

    id: str
    instructions: str
    image: str
    limits: SandboxLimits
    workspace: Path | bytes | None
    protected_paths: tuple[str, ...] = ()
    restored_paths: tuple[str, ...] = ()  # grading puts these back as shipped (``grading.restore``)
    integrity: Integrity = field(default_factory=Integrity)  # what the guard applies (Task.integrity_surface)
    details: dict[str, Any] = field(default_factory=dict)
    source: Any = None
    configured_image: str = (
        ""  # the sandbox image setting ``image`` was resolved from (grading resolves it again)
    )

    @property
    def suite(self) -> str:
        return self.id.split("/", 1)[0]


@dataclass(frozen=True)
class GradeOutcome:
    """A grading's reward (None only when the grader itself failed) and what it found."""

    reward: float | None
    details: dict[str, Any]
    changes: tuple[Any, ...] | None = None  # the changed files, for the guard's review (never stored)


class TaskCatalog(Protocol):
    def list_tasks(self) -> list[TaskInfo]: ...

    def resolve(self, ref: str) -> TaskInfo:
        """The task named ``ref`` (``<suite>/<task_id>``); raises UnknownTaskError."""
        ...


GradeHook = Callable[[SandboxBackend, TaskInfo, bytes], Awaitable[GradeOutcome]]


def served_suites(suites: Sequence[str | Path], state_dir: Path) -> list[Path]:
    """The directories of the suites a gateway serves: those named (names or directories), or,
    when none is named, the built-in suites and every suite registered in ``state_dir``."""
    index = SuiteIndex(state_dir)
    return [index.resolve(suite) for suite in suites] if suites else index.all_dirs()


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
                integrity=task.integrity_surface(),
                details={"horizon": task.horizon},
                source=task,
                configured_image=self._image,
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


async def grade_in_task_mode(backend: SandboxBackend, task: TaskInfo, workspace_tar: bytes) -> GradeOutcome:
    """Grade with the task's own mode (``tasks.grading.modes``) in a fresh container."""
    result = await grade_task(
        backend, task.source, workspace_tar, image=task.configured_image, limits=task.limits
    )
    return GradeOutcome(reward=float(result.reward), details=dict(result.details), changes=result.changes)
