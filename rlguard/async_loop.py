"""``rlguard loop --mode async``: rollout and training overlapped, with bounded staleness.

Rollout workers (asyncio tasks in one background thread) keep playing episodes against the policy
server; each finished, trainable episode's id goes into a *bounded* queue. The trainer (this thread)
takes ``episodes_per_step`` ids from the queue, reads those episodes from the store, trains one step,
commits it and pushes the new weights to the server (``trainer.reload.WeightSync``); it never waits
for the rollout to pause, and the rollout never waits for the optimiser.

* **Versions.** Every generated span records the version of the weights that produced it (the
  built-in server reports it per completion, read under its generation lock; for vLLM/SGLang the
  weight sync's ``current_version``). An episode in flight during a weight update goes on with the
  new weights (a *partial rollout*): its later spans carry the newer version, so its rows are
  mixed-version, and the trainer corrects or drops each token by its own staleness.
* **Staleness.** ``max_staleness`` K: tokens at most K versions behind the trainer are trained with
  truncated importance sampling; episodes holding older tokens are dropped (or kept with TIS,
  ``stale_mode``); ``trainer.staleness`` documents it, the step metrics count it.
* **Back-pressure.** Two bounds. The staleness gate (:class:`StalenessGate`) lets the rollout run at
  most ``max_staleness`` steps ahead of the trainer; and the queue holds at most ``queue_size``
  episodes: a worker whose episode ended while the queue is full waits before starting another. So at
  most ``queue_size + workers`` unconsumed episodes ever exist: a slow trainer slows the rollout
  instead of growing the store.
"""

from __future__ import annotations

import asyncio
import itertools
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlguard.local_gateway import local_gateway
from rlguard.policy_process import gateway_process, policy_server_process
from rlguard.settings import get_settings
from rlguard.tinymodel import resolve_model_name
from rollout.agent import AgentConfig
from rollout.policy_server import build_server
from rollout.runner import RolloutContext, RolloutSpec, run_one
from rollout.serving import serve_in_thread
from trainer.runtime import init_runtime
from trainer.settings import TrainerSettings
from trainer.train import TrainingRun, resolve_model


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


class EpisodeQueue:
    """The bounded queue between the store and the trainer: ids of ended, trainable episodes."""

    def __init__(self, maxsize: int) -> None:
        self._queue: queue.Queue[str] = queue.Queue(maxsize)
        self.high_water = 0
        self.waits = 0

    async def put(self, episode_id: str, stop: threading.Event) -> bool:
        """Wait (without blocking the event loop) until there is room; False when stopped first."""
        waited = False
        while not stop.is_set():
            try:
                self._queue.put_nowait(episode_id)
            except queue.Full:
                waited = True
                await asyncio.sleep(0.05)
                continue
            self.high_water = max(self.high_water, self._queue.qsize())
            self.waits += int(waited)
            return True
        return False

    def take(self, count: int, timeout_s: float, done: threading.Event) -> list[str]:
        """Up to ``count`` ids: waits for ``count`` unless the rollout is done or ``timeout_s`` passes."""
        ids: list[str] = []
        deadline = time.monotonic() + timeout_s
        while len(ids) < count:
            try:
                ids.append(self._queue.get(timeout=0.05))
            except queue.Empty:
                if (done.is_set() and self._queue.empty()) or time.monotonic() >= deadline:
                    break
        return ids

    def qsize(self) -> int:
        return self._queue.qsize()


class StalenessGate:
    """Admission of new episodes so that no sample can exceed ``max_staleness`` by construction.

    An episode may start only while fewer than ``(max_staleness + 1 + v) * episodes_per_step``
    episodes have started, ``v`` being the number of steps trained so far (AReaL's rule): the rollout
    runs at most ``max_staleness`` steps ahead of the trainer, so an episode started under version
    ``v`` is trained by step ``v + max_staleness + 1`` at the latest. Drops then happen only to
    episodes that run unusually long; the trainer still checks every token.
    """

    def __init__(self, max_staleness: int, episodes_per_step: int) -> None:
        self.max_staleness = max_staleness
        self.episodes_per_step = episodes_per_step
        self.steps = 0
        self.started = 0
        self.waits = 0

    def allowed(self) -> int:
        return (self.max_staleness + 1 + self.steps) * self.episodes_per_step

    async def admit(self, stop: threading.Event) -> bool:
        """Wait until one more episode may start; False when stopped first."""
        waited = False
        while self.started >= self.allowed():
            if stop.is_set():
                return False
            waited = True
            await asyncio.sleep(0.05)
        self.started += 1
        self.waits += int(waited)
        return not stop.is_set()

    def stepped(self) -> None:
        """The trainer finished a step (a plain int write: read by the rollout thread)."""
        self.steps += 1


@dataclass
class _RolloutState:
    results: list[Any]
    error: BaseException | None = None


def run_async_loop(
    config: AsyncLoopConfig,
    settings: TrainerSettings,
    on_step: Callable[[dict[str, Any]], None] | None = None,
    step_timeout_s: float = 1800.0,
) -> dict[str, Any]:
    """Play ``config.total_episodes`` episodes while training on them as they land; a summary."""

    settings = settings.model_copy(update={"max_staleness": config.max_staleness})
    app_settings = get_settings()
    model_path = resolve_model(resolve_model_name(config.model))
    run = TrainingRun(
        config.run_dir,
        model_path,
        app_settings.resolved_database_url,
        settings,
        init_runtime(device=config.device),
        run_name=str(Path(config.run_dir).resolve())[-200:],
    )
    version = str(run.trainer.policy_version)
    if config.server_process:
        serving = policy_server_process(run.policy_checkpoint, config.device, version)
    else:
        server = build_server(str(run.policy_checkpoint), config.device, app_settings.rollout.policy)
        server.version = version
        serving = serve_in_thread(server.app, startup_timeout_s=120)
    episodes = EpisodeQueue(config.queue_size)
    gate = StalenessGate(config.max_staleness, config.episodes_per_step)
    stop, rollout_done = threading.Event(), threading.Event()
    state = _RolloutState(results=[])
    steps: list[dict[str, Any]] = []
    started = elapsed = time.perf_counter()
    try:
        with (
            serving as policy_url,
            gateway_process(app_settings) if config.gateway_process else local_gateway(app_settings) as gw,
        ):
            run.policy_url = policy_url
            weights = run.weight_sync()  # knows the version the server serves: episodes record it
            spec = RolloutSpec(
                gateway_url=gw.url,
                admin_token=gw.admin_token,
                suites=config.suites,
                policy="completions",
                policy_url=f"{policy_url}/v1",
                model=str(model_path),
                policy_version=str(run.trainer.policy_version),
                config=AgentConfig.from_settings(
                    app_settings.rollout,
                    max_turns=config.max_turns,
                    max_tokens_per_turn=config.max_tokens_per_turn,
                ),
            )

            async def play() -> None:
                ctx = RolloutContext(spec, version_source=weights.current_version)
                try:
                    plan = ctx.episode_specs(1, list(config.task_filter) or None)
                    if not plan:
                        raise ValueError(f"no task matches {config.task_filter} in {config.suites}")
                    draws = itertools.islice(itertools.cycle(plan), config.total_episodes)

                    async def worker() -> None:
                        for episode in draws:  # shared iterator: each draw is taken once
                            if not await gate.admit(stop):
                                return
                            result = await run_one(ctx, episode)
                            state.results.append(result)
                            trainable = bool(result.episode_id and result.sub_trajectories)
                            if trainable and not await episodes.put(result.episode_id, stop):
                                return

                    await asyncio.gather(*(worker() for _ in range(config.workers)))
                finally:
                    await ctx.aclose()

            def rollout_thread() -> None:
                try:
                    asyncio.run(play())
                except BaseException as exc:  # reported to the trainer's thread below
                    state.error = exc
                finally:
                    rollout_done.set()

            thread = threading.Thread(target=rollout_thread, name="rlguard-rollout", daemon=True)
            started = time.perf_counter()  # servers up: from here on, rollout and training only
            thread.start()
            try:
                while True:
                    ids = episodes.take(config.episodes_per_step, step_timeout_s, rollout_done)
                    if state.error is not None:
                        raise state.error
                    if not ids:
                        if rollout_done.is_set():
                            break
                        continue
                    step = run.step(max_episodes=len(ids), episode_ids=ids)
                    gate.stepped()
                    summary = {
                        "step": step.step if step else None,
                        "episodes": len(ids),
                        "policy_version": run.trainer.policy_version,
                        "queue": episodes.qsize(),
                        "seconds": time.perf_counter() - started,
                        "metrics": step.metrics if step else {},
                    }
                    steps.append(summary)
                    if on_step is not None:
                        on_step(summary)
            finally:
                stop.set()
                thread.join(timeout=600)
                elapsed = time.perf_counter() - started
            if state.error is not None:
                raise state.error
    finally:
        run.close()
    return _summary(state.results, steps, episodes, gate, run, elapsed)


def _summary(
    results: list[Any],
    steps: list[dict[str, Any]],
    episodes: EpisodeQueue,
    gate: StalenessGate,
    run: TrainingRun,
    seconds: float,
) -> dict[str, Any]:
    """Throughput, staleness and drops over the whole run (token-weighted staleness per step)."""
    trained = [s for s in steps if s["step"] is not None]
    tokens = [s["metrics"].get("data/action_tokens", 0.0) for s in trained]
    staleness = [s["metrics"].get("data/staleness_mean", 0.0) for s in trained]
    rewards = [r.reward for r in results if r.reward is not None]
    mixed = sum(1 for r in results if len({v for t in r.sub_trajectories for v in t.versions}) > 1)
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
        "queue_high_water": episodes.high_water,
        "queue_full_waits": episodes.waits,
        "staleness_gate_waits": gate.waits,
        "statuses": sorted({r.status for r in results}),
        "per_step": steps,
    }
