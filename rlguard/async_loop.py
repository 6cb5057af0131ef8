"""``rlguard loop --mode async``: rollout and training overlapped, with bounded staleness.

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
  truncated importance sampling; episodes holding older tokens are dropped (or kept with TIS,
  ``stale_mode``); ``trainer.staleness`` documents it, the step metrics count it.
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
from pathlib import Path
from typing import Any

import torch

from rlguard.cpu_meter import busy_cpu_seconds
from rlguard.errors import RlguardError
from rlguard.local_gateway import local_gateway
from rlguard.loop import loop_rollout_spec, open_loop_run, serve_loop_policy
from rlguard.orphans import die_with_parent
from rlguard.policy_process import gateway_process
from rlguard.settings import get_settings
from rollout.runner import RolloutContext, run_one
from trainer.settings import TrainerSettings
from trainer.train import TrainingRun


@dataclass(frozen=True)
class AsyncLoopConfig:
    """The asynchronous loop's shape; episodes are drawn round-robin over the chosen tasks."""

    model: str = "tiny"
    total_episodes: int = 8
    episodes_per_step: int = 2
    workers: int = 2
    queue_size: int = 4
    max_staleness: int = 1
    suites: tuple[str, ...] = ("builtin",)
    task_filter: tuple[str, ...] = ()
    run_dir: Path = Path("runs/loop-async")
    max_turns: int | None = None
    max_tokens_per_turn: int | None = None
    device: str = "cpu"
    server_process: bool = True  # the policy server in its own process (no shared interpreter lock)
    gateway_process: bool = True  # the gateway too
    policy_url: str | None = None  # a policy server already running (vLLM, SGLang): not started here
    served_model_name: str = "default"  # the model name that server answers to
    # The trainer's torch threads while the rollout runs beside it: leaving cores to the policy
    # server and the sandboxes beats oversubscribing them (OpenMP threads spin while they wait).
    trainer_threads: int = max(1, (os.cpu_count() or 2) // 2)

    def __post_init__(self) -> None:
        for name in ("total_episodes", "episodes_per_step", "workers", "queue_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.max_staleness < 0:
            raise ValueError(f"max_staleness must be >= 0, got {self.max_staleness}")
        if self.queue_size < self.episodes_per_step:
            raise ValueError(
                f"queue_size ({self.queue_size}) must hold a step's episodes ({self.episodes_per_step})"
            )


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


def rollout_process(spec: Any, config: AsyncLoopConfig, channels: _Channels, parent_pid: int) -> None:
    """The rollout workers, in their own process (started by :func:`run_async_loop`); they end with
    the trainer's process even when it is killed."""
    die_with_parent(parent_pid)
    torch.set_num_threads(1)
    try:
        asyncio.run(_play(spec, config, channels))
    except BaseException as exc:  # reported to the trainer through the event stream
        channels.events.put(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        channels.events.put(("done", None))


async def _play(spec: Any, config: AsyncLoopConfig, ch: _Channels) -> None:
    ctx = RolloutContext(spec, version_source=lambda: str(ch.version.value))
    gate = StalenessGate(config.max_staleness, config.episodes_per_step, lambda: ch.steps.value)
    stats = {"queue_high_water": 0, "queue_full_waits": 0}
    try:
        plan = ctx.episode_specs(1, list(config.task_filter) or None)
        if not plan:
            raise ValueError(f"no task matches {config.task_filter} in {config.suites}")
        draws = itertools.islice(itertools.cycle(plan), config.total_episodes)
        ch.events.put(("ready", None))

        async def put(episode_id: str) -> bool:
            waited = False
            while not ch.stop.is_set():
                try:
                    ch.ids.put_nowait(episode_id)
                except queue.Full:
                    waited = True
                    await asyncio.sleep(0.02)
                    continue
                stats["queue_high_water"] = max(stats["queue_high_water"], ch.ids.qsize())
                stats["queue_full_waits"] += int(waited)
                return True
            return False

        async def worker() -> None:
            for episode in draws:  # shared iterator: each draw is taken once
                if not await gate.admit(ch.stop):
                    return
                result = await run_one(ctx, episode)
                versions = [t.versions for t in result.sub_trajectories]
                ch.events.put(
                    ("result", {"status": result.status, "reward": result.reward, "versions": versions})
                )
                trainable = bool(result.episode_id and result.sub_trajectories)
                if trainable and not await put(result.episode_id):
                    return

        await asyncio.gather(*(worker() for _ in range(config.workers)))
    finally:
        ch.events.put(("stats", {**stats, "staleness_gate_waits": gate.waits}))
        await ctx.aclose()


@dataclass
class _RolloutState:
    results: list[dict[str, Any]] = field(default_factory=list)
    stats: dict[str, int] = field(default_factory=dict)
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
    """Up to ``count`` episode ids; fewer only when the rollout ended (or failed) or time ran out."""
    taken: list[str] = []
    deadline = time.monotonic() + timeout_s
    while len(taken) < count and state.error is None:
        try:
            taken.append(ids.get(timeout=0.02))
            continue
        except queue.Empty:
            pass
        state.drain(events)
        state.notice_death(events, process)
        if (state.done and ids.empty()) or time.monotonic() >= deadline:
            break
    return taken


def run_async_loop(
    config: AsyncLoopConfig,
    settings: TrainerSettings,
    on_step: Callable[[dict[str, Any]], None] | None = None,
    step_timeout_s: float = 1800.0,
) -> dict[str, Any]:
    """Play ``config.total_episodes`` episodes while training on them as they land; a summary."""
    settings = settings.model_copy(update={"max_staleness": config.max_staleness})
    threads = torch.get_num_threads()
    torch.set_num_threads(config.trainer_threads)
    try:
        return _run(config, settings, on_step, step_timeout_s)
    finally:
        torch.set_num_threads(threads)


def _run(
    config: AsyncLoopConfig,
    settings: TrainerSettings,
    on_step: Callable[[dict[str, Any]], None] | None,
    step_timeout_s: float,
) -> dict[str, Any]:
    app_settings = get_settings()
    run, model_path = open_loop_run(config.model, config.run_dir, config.device, settings)
    version = str(run.trainer.policy_version)
    serving = serve_loop_policy(run, config.device, config.server_process, config.policy_url)
    mp = multiprocessing.get_context("spawn")
    channels = _Channels(
        ids=mp.Queue(config.queue_size),
        events=mp.Queue(),
        steps=mp.Value("i", 0),
        version=mp.Value("i", run.trainer.policy_version),
        stop=mp.Event(),
    )
    state = _RolloutState()
    steps: list[dict[str, Any]] = []
    started = elapsed = time.perf_counter()
    cpu_started, cpu_used = busy_cpu_seconds(), 0.0
    try:
        with (
            serving as policy_url,
            gateway_process(app_settings) if config.gateway_process else local_gateway(app_settings) as gw,
        ):
            run.policy_url = policy_url
            spec = loop_rollout_spec(config, gw, policy_url, model_path, version)
            process = mp.Process(
                target=rollout_process,
                args=(spec, config, channels, os.getpid()),
                name="rlguard-rollout",
            )
            process.start()
            try:
                while not (state.ready or state.done or state.error):
                    state.drain(channels.events, wait_s=1.0)
                    state.notice_death(channels.events, process)
                started = time.perf_counter()  # servers and workers up: rollout and training only
                cpu_started = busy_cpu_seconds()
                while state.error is None:
                    ids = take(
                        channels.ids,
                        config.episodes_per_step,
                        state,
                        channels.events,
                        process,
                        step_timeout_s,
                    )
                    if not ids:
                        if state.done or state.error:
                            break
                        continue
                    step = run.step(max_episodes=len(ids), episode_ids=ids)
                    channels.version.value = run.trainer.policy_version  # what the server now serves
                    channels.steps.value += 1
                    summary = {
                        "step": step.step if step else None,
                        "episodes": len(ids),
                        "policy_version": run.trainer.policy_version,
                        "queue": channels.ids.qsize(),
                        "seconds": time.perf_counter() - started,
                        "metrics": step.metrics if step else {},
                    }
                    steps.append(summary)
                    if on_step is not None:
                        on_step(summary)
            finally:
                elapsed = time.perf_counter() - started
                cpu_used = busy_cpu_seconds() - cpu_started
                channels.stop.set()
                deadline = time.monotonic() + 600
                while not state.done and process.is_alive() and time.monotonic() < deadline:
                    state.drain(channels.events, wait_s=0.5)
                process.join(timeout=30)
                if process.is_alive():
                    process.kill()
                state.drain(channels.events)
            if state.error is not None:
                raise RlguardError(f"the rollout process failed: {state.error}")
    finally:
        run.close()
    return {**_summary(state, steps, run, elapsed), "busy_cpu_s": cpu_used}


def _summary(
    state: _RolloutState, steps: list[dict[str, Any]], run: TrainingRun, seconds: float
) -> dict[str, Any]:
    """Throughput, staleness and drops over the whole run (token-weighted staleness per step)."""
    trained = [s for s in steps if s["step"] is not None]
    tokens = [s["metrics"].get("data/action_tokens", 0.0) for s in trained]
    staleness = [s["metrics"].get("data/staleness_mean", 0.0) for s in trained]
    results = state.results
    rewards = [r["reward"] for r in results if r["reward"] is not None]
    mixed = sum(1 for r in results if len({v for t in r["versions"] for v in t}) > 1)
    return {
        "episodes": len(results),
        "seconds": seconds,
        "episodes_per_s": len(results) / seconds if seconds else 0.0,
        "steps": len(trained),
        "trained_episodes": int(sum(s["metrics"].get("data/episodes", 0.0) for s in trained)),
        "policy_version": run.trainer.policy_version,
        "mean_reward": sum(rewards) / len(rewards) if rewards else 0.0,
        "mean_staleness": sum(t * s for t, s in zip(tokens, staleness, strict=True)) / max(sum(tokens), 1.0),
        "max_staleness": max((s["metrics"].get("data/staleness_max", 0.0) for s in trained), default=0.0),
        "dropped_episodes": run.dropped_episodes,
        "dropped_fraction": run.dropped_episodes / run.read_episodes if run.read_episodes else 0.0,
        "mixed_version_episodes": mixed,
        **state.stats,
        "statuses": sorted({r["status"] for r in results}),
        "per_step": steps,
    }
