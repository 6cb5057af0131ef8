"""The asynchronous schedule: rollout and training overlapped, with bounded staleness.

Rollout workers (asyncio tasks in a child process, :func:`rollout_process`) keep playing episodes
against the policy server; each finished, trainable episode's id goes into a *bounded* queue. The
trainer (this process) takes ``episodes_per_step`` ids from the queue, reads those episodes from the
store, trains one step, commits it and pushes the new weights to the server
(``trainer.reload.WeightSync``); it never waits for the rollout to pause, and the rollout never
waits for the optimiser. Four processes: trainer, rollout workers, policy server, gateway; in one
process they would share one interpreter lock (a tiny model's training step is mostly Python, and
it ran 3x slower beside the rollout's event loop than alone).

* **Versions.** Every generated span records the version of the weights that produced it (the
  built-in server reports it per completion, read under its generation lock; otherwise the version
  the trainer last pushed, shared with the rollout process). An episode in flight during a weight
  update goes on with the new weights (a *partial rollout*): its later spans carry the newer
  version, so its rows are mixed-version, and the trainer corrects or drops each token by its own
  staleness.
* **Staleness.** ``max_staleness`` K: tokens at most K versions behind the trainer are trained with
  truncated importance sampling; older tokens are masked from the loss (or their episode dropped,
  or kept with TIS: ``stale_mode``); ``trainer.staleness`` documents it, the step metrics count it.
* **Whole groups.** The plan holds each task's ``group_size`` episodes one after another and the
  workers take them in that order; a finished episode waits in a ``rollout.groups.GroupBuffer``
  until its whole group has finished, and only complete groups enter the queue (a group left with
  fewer than 2 usable episodes is reported and marked unusable), so every group the trainer takes
  has its full size, however long its slowest member ran.
* **Back-pressure.** Two bounds. The staleness gate (:class:`StalenessGate`) lets the rollout run at
  most K steps ahead of the trainer; and the queue holds at most ``queue_size`` episodes: a worker
  whose episode ended while the queue is full waits before starting another. So at most
  ``queue_size + workers`` unconsumed episodes ever exist: a slow trainer slows the rollout instead
  of growing the store.
"""

from __future__ import annotations

import asyncio
import itertools
import multiprocessing
import os
import queue
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from rlguard.errors import RlguardError
from rlguard.loops.cpu_meter import busy_cpu_seconds
from rlguard.loops.orphans import die_with_parent
from rlguard.loops.services import LoopServices
from rlguard.loops.spec import AsyncSchedule
from rlguard.loops.summary import EpisodeOutcome, LoopSummary, StepSummary, summarize
from rollout.groups import GroupBuffer, GroupMember
from rollout.runner import EpisodeSpec, RolloutContext, RolloutSpec, run_one

STEP_TIMEOUT_S = 1800.0
STOP_DRAIN_S = 600.0


class StalenessGate:
    """Admission of new episodes so that no sample can exceed ``max_staleness`` by construction.

    An episode may start only while fewer than ``(max_staleness + 1 + v) * episodes_per_step``
    episodes have started, ``v`` being the number of steps trained so far (AReaL's rule): the rollout
    runs at most ``max_staleness`` steps ahead of the trainer, so an episode started under version
    ``v`` is trained by step ``v + max_staleness + 1`` at the latest. Drops then happen only to
    episodes that run unusually long; the trainer still checks every token.
    """

    def __init__(self, max_staleness: int, episodes_per_step: int, steps: Callable[[], int]) -> None:
        self.max_staleness = max_staleness
        self.episodes_per_step = episodes_per_step
        self.steps = steps
        self.started = 0
        self.waits = 0

    def allowed(self) -> int:
        return (self.max_staleness + 1 + self.steps()) * self.episodes_per_step

    async def admit(self, stop: Any) -> bool:
        """Wait until one more episode may start; False when stopped first."""
        waited = False
        while self.started >= self.allowed():
            if stop.is_set():
                return False
            waited = True
            await asyncio.sleep(0.02)
        self.started += 1
        self.waits += int(waited)
        return not stop.is_set()


@dataclass(frozen=True)
class _Channels:
    """What the trainer and the rollout process share: the bounded id queue, an event stream
    (results, errors, the end), the trainer's step count and served version, and a stop flag."""

    ids: Any
    events: Any
    steps: Any
    version: Any
    stop: Any


def rollout_process(
    rollout: RolloutSpec,
    plan: list[list[EpisodeSpec]],
    schedule: AsyncSchedule,
    channels: _Channels,
    parent_pid: int,
    group_size: int = 1,
) -> None:
    """The rollout workers, in their own process (started by :func:`run_async`); they end with
    the trainer's process even when it is killed."""
    die_with_parent(parent_pid)
    torch.set_num_threads(1)
    try:
        asyncio.run(_play(rollout, plan, schedule, channels, group_size))
    except BaseException as exc:  # reported to the trainer through the event stream
        channels.events.put(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        channels.events.put(("done", None))


async def _play(
    rollout: RolloutSpec, plan: list[list[EpisodeSpec]], schedule: AsyncSchedule, ch: _Channels, size: int = 1
) -> None:
    ctx = RolloutContext(rollout, version_source=lambda: str(ch.version.value))
    stats = {"queue_high_water": 0, "queue_full_waits": 0}
    gate = StalenessGate(schedule.max_staleness, len(plan[0]), lambda: ch.steps.value)
    groups = GroupBuffer(min_size=min(2, size))
    try:
        flat = list(itertools.chain.from_iterable(plan))  # a task's group stays consecutive
        draws = iter(
            (GroupMember(i // size, episode.task_id, i % size, size, 0), episode)
            for i, episode in enumerate(flat)
        )
        ch.events.put(("ready", None))

        async def put(group: list[str]) -> bool:
            waited = False
            while not ch.stop.is_set():
                try:
                    ch.ids.put_nowait(group)
                except queue.Full:
                    waited = True
                    await asyncio.sleep(0.02)
                    continue
                stats["queue_high_water"] = max(stats["queue_high_water"], ch.ids.qsize())
                stats["queue_full_waits"] += int(waited)
                return True
            return False

        async def worker() -> None:
            for member, episode in draws:  # shared iterator: each draw is taken once
                if not await gate.admit(ch.stop):
                    return
                result = await run_one(ctx, episode)
                versions = [t.versions for t in result.sub_trajectories]
                ch.events.put(
                    ("result", {"status": result.status, "reward": result.reward, "versions": versions})
                )
                discarded = len(groups.discarded)
                ready = groups.add(member, result.episode_id, result.trainable)
                unusable = {e: "its task group was left with one usable episode"
                            for lost in groups.discarded[discarded:] for e in lost.episode_ids}  # fmt: skip
                if result.episode_id and not result.trainable:
                    unusable[result.episode_id] = f"the rollout ended it: {result.end_reason}"
                if unusable:
                    ch.events.put(("unusable", unusable))
                if ready is not None and not await put(list(ready.episode_ids)):
                    return

        await asyncio.gather(*(worker() for _ in range(schedule.in_flight(len(plan[0])))))
    finally:
        ch.events.put(("stats", {**stats, "staleness_gate_waits": gate.waits}))
        await ctx.aclose()


@dataclass
class _RolloutState:
    results: list[dict[str, Any]] = field(default_factory=list)
    stats: dict[str, int] = field(default_factory=dict)
    unusable: dict[str, str] = field(default_factory=dict)  # episodes never to train, and why
    error: str | None = None
    ready: bool = False
    done: bool = False

    def drain(self, events: Any, wait_s: float = 0.0) -> None:
        """Read what the rollout process reported (waiting up to ``wait_s`` for the first event)."""
        block = wait_s > 0
        while True:
            try:
                kind, payload = events.get(timeout=wait_s) if block else events.get_nowait()
            except queue.Empty:
                return
            block = False
            if kind == "result":
                self.results.append(payload)
            elif kind == "stats":
                self.stats = payload
            elif kind == "unusable":
                self.unusable |= payload
            elif kind == "error":
                self.error = payload
            elif kind == "ready":
                self.ready = True
            elif kind == "done":
                self.done = True

    def notice_death(self, events: Any, process: Any) -> None:
        """A rollout process that died without saying so (killed, or failed while it started) is an
        error: nothing else would ever end the trainer's wait."""
        if self.done or self.error is not None or process.is_alive():
            return
        self.drain(events)  # what it reported before it died (its queue is flushed at exit)
        if not self.done and self.error is None:
            self.error = f"the rollout process exited (code {process.exitcode}) without reporting why"


def take(
    ids: Any, count: int, state: _RolloutState, events: Any, process: Any, timeout_s: float
) -> list[str]:
    """Whole groups' episode ids, up to ``count`` episodes; fewer only when the rollout ended (or
    failed) or time ran out."""
    taken: list[str] = []
    deadline = time.monotonic() + timeout_s
    while len(taken) < count and state.error is None:
        try:
            taken.extend(ids.get(timeout=0.02))
            continue
        except queue.Empty:
            pass
        state.drain(events)
        state.notice_death(events, process)
        if (state.done and ids.empty()) or time.monotonic() >= deadline:
            break
    return taken


def run_async(
    plan: list[list[EpisodeSpec]],
    schedule: AsyncSchedule,
    services: LoopServices,
    on_step: Callable[[StepSummary], None] | None = None,
    step_timeout_s: float = STEP_TIMEOUT_S,
    group_size: int = 1,
) -> LoopSummary:
    """Play the plan's episodes in a rollout process while training on them as they land, whole
    groups of ``group_size`` consecutive episodes at a time."""
    run = services.run
    episodes_per_step = len(plan[0])
    mp = multiprocessing.get_context("spawn")
    channels = _Channels(
        ids=mp.Queue(max(1, schedule.queue_bound(episodes_per_step) // group_size)),  # whole groups
        events=mp.Queue(),
        steps=mp.Value("i", 0),
        version=mp.Value("i", run.trainer.policy_version),
        stop=mp.Event(),
    )
    state = _RolloutState()
    steps: list[StepSummary] = []
    process = mp.Process(
        target=rollout_process,
        args=(services.rollout, plan, schedule, channels, os.getpid(), group_size),
        name="rlguard-rollout",
    )
    process.start()
    started = time.perf_counter()
    cpu_started = busy_cpu_seconds()
    try:
        while not (state.ready or state.done or state.error):
            state.drain(channels.events, wait_s=1.0)
            state.notice_death(channels.events, process)
        started = time.perf_counter()  # servers and workers up: rollout and training only
        cpu_started = busy_cpu_seconds()
        while state.error is None:
            ids = take(channels.ids, episodes_per_step, state, channels.events, process, step_timeout_s)
            if not ids:
                if state.done or state.error:
                    break
                continue
            if state.unusable and run.runtime.is_main:
                run.store.mark_unusable(state.unusable)
                state.unusable = {}
            step = run.step(max_episodes=len(ids), episode_ids=ids)
            channels.version.value = run.trainer.policy_version  # what the server now serves
            channels.steps.value += 1
            summary = StepSummary(
                step=step.step if step else None,
                episodes=len(ids),
                policy_version=run.trainer.policy_version,
                mean_reward=_mean_reward(state.results[-len(ids) :]),
                seconds=time.perf_counter() - started,
                metrics=step.metrics if step else {},
                queue=channels.ids.qsize(),
            )
            steps.append(summary)
            if on_step is not None:
                on_step(summary)
    finally:
        elapsed = time.perf_counter() - started
        cpu_used = busy_cpu_seconds() - cpu_started
        _stop(channels, state, process)
    if state.error is not None:
        raise RlguardError(f"the rollout process failed: {state.error}")
    outcomes = [EpisodeOutcome(r["status"], r["reward"], r["versions"]) for r in state.results]
    return summarize("async", outcomes, steps, run, elapsed, cpu_used, state.stats)


def _mean_reward(results: list[dict[str, Any]]) -> float:
    rewards = [r["reward"] for r in results if r["reward"] is not None]
    return sum(rewards) / len(rewards) if rewards else 0.0


def _stop(channels: _Channels, state: _RolloutState, process: Any) -> None:
    """Ask the workers to stop, wait for their last reports, then make sure the process is gone."""
    channels.stop.set()
    deadline = time.monotonic() + STOP_DRAIN_S
    while not state.done and process.is_alive() and time.monotonic() < deadline:
        state.drain(channels.events, wait_s=0.5)
    process.join(timeout=30)
    if process.is_alive():
        process.kill()
    state.drain(channels.events)
