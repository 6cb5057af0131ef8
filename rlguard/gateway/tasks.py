"""What the gateway needs from tasks: a catalog to resolve ``<suite>/<id>`` and a grading hook.

The gateway does not parse task suites or run graders itself (``tasks.spec`` and
``tasks.grading.grade`` do); it depends on these two small interfaces so it can be run, and tested,
with any catalog.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from sandbox.base import SandboxBackend
from sandbox.settings import SandboxLimits


class UnknownTaskError(KeyError):
    """No task has this reference."""


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
    details: dict[str, Any] = field(default_factory=dict)
    source: Any = None

    @property
    def suite(self) -> str:
        return self.id.split("/", 1)[0]


@dataclass(frozen=True)
class GradeOutcome:
    """A grading's reward (None only when the grader itself failed) and what it found."""

    reward: float | None
    details: dict[str, Any]


class TaskCatalog(Protocol):
    def list_tasks(self) -> list[TaskInfo]: ...

    def resolve(self, ref: str) -> TaskInfo:
        """The task named ``ref`` (``<suite>/<task_id>``); raises UnknownTaskError."""
        ...


GradeHook = Callable[[SandboxBackend, TaskInfo, bytes], Awaitable[GradeOutcome]]
