"""What a loop plays and trains (:class:`LoopSpec`), on which schedule, and what it reports.

One spec, two schedules: :class:`SyncSchedule` plays a step's episodes, trains on exactly them,
then plays the next step's on the new weights; :class:`AsyncSchedule` keeps rollout workers playing
while the trainer trains on what landed, bounded by a queue and a staleness gate. The benchmark
runs the same spec on both; both report a ``rlguard.loops.summary.LoopSummary``.

Episodes come in groups: each step plays ``group_size`` episodes of each of ``tasks_per_step``
tasks (drawn round-robin over the tasks the suites and filter match), so group-relative estimators
(GRPO, RLOO) always see a task's group within one step.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass
from pathlib import Path

from rollout.runner import EpisodeSpec
from tasks.spec import TaskRegistry


@dataclass(frozen=True)
class LoopSpec:
    """The loop's work: the starting model, the tasks, the episode shape, how many steps."""

    model: str = "tiny"
    suites: tuple[str, ...] = ("builtin",)
    task_filter: tuple[str, ...] = ()
    run_dir: Path = Path("runs/loop")
    steps: int = 2
    group_size: int = 1  # episodes of one task in one step (a GRPO group)
    tasks_per_step: int | None = None  # None: every matched task, every step
    max_turns: int | None = None
    max_tokens_per_turn: int | None = None
    device: str = "cpu"
    policy_url: str | None = None  # a policy server already running (vLLM, SGLang): not started here
    served_model_name: str = "default"  # the model name that server answers to
    server_process: bool = False  # the built-in policy server in its own process (no shared GIL)
    gateway_process: bool = False  # the gateway too
    trainer_threads: int | None = None  # torch threads while training (None: torch's default)

    def __post_init__(self) -> None:
        for name in ("steps", "group_size", "tasks_per_step"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be at least 1, got {value}")

    def plan(self) -> list[list[EpisodeSpec]]:
        """Each step's episodes: ``group_size`` of each of ``tasks_per_step`` tasks, the tasks taken
        round-robin from step to step over those the suites and the filter match."""
        tasks = [
            EpisodeSpec(task.id)
            for task in TaskRegistry(list(self.suites)).list()
            if not self.task_filter or task.id in self.task_filter or task.task_id in self.task_filter
        ]
        if not tasks:
            raise ValueError(f"no task matches {list(self.task_filter)} in the suites {list(self.suites)}")
        per_step = self.tasks_per_step or len(tasks)
        draws = itertools.cycle(tasks)
        return [
            [task for task in itertools.islice(draws, per_step) for _ in range(self.group_size)]
            for _ in range(self.steps)
        ]


@dataclass(frozen=True)
class SyncSchedule:
    """Rollout and training in turn: every trained token is on-policy."""

    name = "sync"


def _half_the_cores() -> int:
    return max(1, (os.cpu_count() or 2) // 2)


@dataclass(frozen=True)
class AsyncSchedule:
    """Rollout and training overlapped. ``workers`` episodes are in flight (default: what the
    staleness gate admits, ``(max_staleness + 1) x episodes_per_step``); the queue holds at most
    ``queue_size`` finished episodes (default the same); tokens more than ``max_staleness``
    versions old are corrected or dropped by the trainer."""

    max_staleness: int = 1
    workers: int | None = None
    queue_size: int | None = None

    name = "async"

    def __post_init__(self) -> None:
        if self.max_staleness < 0:
            raise ValueError(f"max_staleness must be >= 0, got {self.max_staleness}")
        for name in ("workers", "queue_size"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be at least 1, got {value}")

    def in_flight(self, episodes_per_step: int) -> int:
        return self.workers or (self.max_staleness + 1) * episodes_per_step

    def queue_bound(self, episodes_per_step: int) -> int:
        bound = self.queue_size or (self.max_staleness + 1) * episodes_per_step
        if bound < episodes_per_step:
            raise ValueError(f"queue_size ({bound}) must hold a step's episodes ({episodes_per_step})")
        return bound


Schedule = SyncSchedule | AsyncSchedule


def trainer_threads(spec: LoopSpec, schedule: Schedule) -> int | None:
    """The trainer's torch threads: the spec's, else half the cores beside an async rollout
    (leaving cores to the policy server and the sandboxes beats oversubscribing them: OpenMP
    threads spin while they wait), else torch's default."""
    if spec.trainer_threads is not None:
        return spec.trainer_threads
    return _half_the_cores() if isinstance(schedule, AsyncSchedule) else None
