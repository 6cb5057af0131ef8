"""``run_loop``: one entry for every schedule of the closed loop.

It sets the trainer's torch threads for the run, opens the loop's services (training run, policy
server, gateway) and plays the spec on the schedule; the staleness bound the trainer enforces is
the schedule's (0 for sync: every token is on-policy).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import torch

from rlguard.loops.asynchronous import run_async
from rlguard.loops.services import loop_services
from rlguard.loops.spec import AsyncSchedule, LoopSpec, Schedule, trainer_threads
from rlguard.loops.summary import LoopSummary, StepSummary
from rlguard.loops.sync import run_sync
from rlguard.settings import Settings
from trainer.settings import TrainerSettings


def run_loop(
    spec: LoopSpec,
    schedule: Schedule,
    settings: Settings,
    trainer: TrainerSettings | None = None,
    on_step: Callable[[StepSummary], None] | None = None,
) -> LoopSummary:
    """Play and train ``spec.steps`` steps on ``schedule``; the run's summary."""
    trainer = trainer or settings.trainer
    if trainer.algo in ("grpo", "rloo") and spec.group_size < trainer.min_group_size:
        raise ValueError(
            f"--algo {trainer.algo} compares the episodes of one task: group_size must be at least "
            f"{trainer.min_group_size}, got {spec.group_size}"
        )
    # The trainer scores logprobs at the temperature the rollout samples at (greedy: none to match).
    temperature = settings.rollout.temperature
    trainer = trainer.model_copy(update={"rollout_temperature": temperature if temperature > 0 else 1.0})
    plan = spec.plan()
    if isinstance(schedule, AsyncSchedule):
        trainer = trainer.model_copy(update={"max_staleness": schedule.max_staleness})
    previous = torch.get_num_threads()
    threads = trainer_threads(spec, schedule)
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        with loop_services(spec, settings, trainer) as services:
            if isinstance(schedule, AsyncSchedule):
                return run_async(plan, schedule, services, on_step, group_size=spec.group_size)
            return asyncio.run(run_sync(plan, services, on_step))
    finally:
        torch.set_num_threads(previous)
