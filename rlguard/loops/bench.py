"""``rlguard bench loop``: the same loop spec on the sync and the async schedule.

Both run the tiny model on built-in tasks through the real gateway (Docker sandboxes), with the policy
server and the gateway in their own processes, the same episodes per training step and the same
torch threads for the trainer (half the cores: with more, the trainer's OpenMP threads spin against
the rollout's processes). Each is timed from the moment its servers (and, async, its rollout
process) are up to its last training step; start-up is left out. ``async_vs_sync`` is the ratio of
episodes per second.

Episodes are agentic: 8 turns of up to 64 tokens each by default (``--max-turns``,
``--max-tokens-per-turn``), so generation, not sandbox start-up and grading, takes most of an
episode, as it does for real agents (tens of turns). Very short episodes (2 turns of 48 tokens)
spend most of their CPU on the two containers and the grader; see the README for both shapes.
32 episodes by default (16 steps): the pipeline's fill (the first step waits for the first
episodes) and drain (the last episodes wait for the last step) cost about a step each, a quarter of
a run of 8 steps.

Episodes in flight: the sync loop plays one step's batch at a time (more would change its batch or
make its data off-policy), the async loop as many as its staleness gate admits,
``(max_staleness + 1) * episodes_per_step`` (``--workers`` overrides it); that, and not waiting for
the optimiser, is what asynchrony buys.

What bounds it here: per round the sync loop spends ``rollout + train + reload``, the async loop
about ``max(rollout, train + reload)``, so the ratio is at most ``1 + min/max`` of the two phases,
less the pipeline's fill and drain. On a machine this small the CPU binds first: the tiny model, the
sandboxes and the grader all run on the same cores, so overlap can only fill the cores the sync
loop left idle. ``cpu_ceiling`` = cores / ``sync_busy_cores`` is the ratio the async loop would
reach doing the same work with every core busy; ``async_busy_cores`` shows how close it came.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from rlguard.loops.run import run_loop
from rlguard.loops.spec import AsyncSchedule, LoopSpec, SyncSchedule
from rlguard.loops.summary import LoopSummary
from rlguard.settings import Settings, get_settings

DEFAULT_TASKS = ("lru-cache", "roman-numerals")


def run_loop_bench(
    episodes: int = 32,
    episodes_per_step: int = 2,
    max_staleness: int = 1,
    max_turns: int = 8,
    max_tokens_per_turn: int = 64,
    tasks: tuple[str, ...] = DEFAULT_TASKS,
    queue_size: int | None = None,
    out_dir: Path | None = None,
    trainer_threads: int | None = None,
    repeats: int = 2,
    workers: int | None = None,
) -> dict[str, Any]:
    """Run both schedules on ``episodes`` episodes (``repeats`` times each, A-B-B-A); a flat dict."""
    if repeats not in (1, 2):
        raise ValueError(f"repeats must be 1 or 2, got {repeats}")
    if episodes < 2 * episodes_per_step:
        raise ValueError(f"need at least two steps' episodes ({2 * episodes_per_step}), got {episodes}")
    if episodes_per_step % len(tasks):
        raise ValueError(
            f"episodes_per_step ({episodes_per_step}) must be a multiple of the {len(tasks)} tasks"
        )
    if out_dir is None:  # nothing of the runs is kept unless asked for
        with tempfile.TemporaryDirectory(prefix="rlguard-bench-loop-") as scratch:
            return run_loop_bench(
                episodes, episodes_per_step, max_staleness, max_turns, max_tokens_per_turn, tasks,
                queue_size, Path(scratch), trainer_threads, repeats, workers,
            )  # fmt: skip
    threads = trainer_threads or max(1, (os.cpu_count() or 2) // 2)  # the same for both schedules
    spec = LoopSpec(
        task_filter=tasks,
        steps=episodes // episodes_per_step,
        group_size=episodes_per_step // len(tasks),
        tasks_per_step=len(tasks),
        max_turns=max_turns,
        max_tokens_per_turn=max_tokens_per_turn,
        server_process=True,
        gateway_process=True,
        trainer_threads=threads,
    )
    overlapped = AsyncSchedule(max_staleness=max_staleness, workers=workers, queue_size=queue_size)
    runs: dict[str, list[LoopSummary]] = {"sync": [], "async": []}
    # A-B-B-A: other jobs' load drifts over minutes on a shared machine; each schedule gets an early
    # and a late slot, so a drift hits both alike.
    for index, schedule in enumerate((SyncSchedule(), overlapped, overlapped, SyncSchedule())[: 2 * repeats]):
        root = Path(out_dir) / f"{index}-{schedule.name}"
        with _fresh_store(get_settings(), root / "state") as settings:
            summary = run_loop(replace(spec, run_dir=root / "run"), schedule, settings)
        runs[schedule.name].append(summary)
    return _compare(runs, episodes_per_step, overlapped, threads)


@contextlib.contextmanager
def _fresh_store(settings: Settings, state_dir: Path) -> Iterator[Settings]:
    """The settings with a state directory (and so a SQLite store) of the run's own; the gateway's
    child process reads it from the environment, set for the block's duration."""
    previous = os.environ.get("RLGUARD_STATE_DIR")
    os.environ["RLGUARD_STATE_DIR"] = str(state_dir)
    try:
        yield settings.model_copy(update={"state_dir": state_dir, "database_url": ""})
    finally:
        if previous is None:
            os.environ.pop("RLGUARD_STATE_DIR", None)
        else:
            os.environ["RLGUARD_STATE_DIR"] = previous


def _compare(
    runs: dict[str, list[LoopSummary]], episodes_per_step: int, schedule: AsyncSchedule, threads: int
) -> dict[str, Any]:
    def total(name: str, key: str) -> float:
        return sum(getattr(summary, key) for summary in runs[name])

    sync_rate = total("sync", "episodes") / total("sync", "seconds")
    async_rate = total("async", "episodes") / total("async", "seconds")
    steps = [s for r in runs["async"] for s in r.per_step if s.step is not None]
    tokens = sum(s.metrics.get("data/loss_tokens", s.metrics.get("data/action_tokens", 0.0)) for s in steps)
    stale = sum(
        s.metrics.get("data/loss_tokens", s.metrics.get("data/action_tokens", 0.0))
        * s.metrics.get("data/staleness_mean", 0.0)
        for s in steps
    )
    read = total("async", "trained_episodes") + total("async", "dropped_episodes")
    cpus = os.cpu_count() or 1
    sync_busy_cores = total("sync", "busy_cpu_s") / total("sync", "seconds")
    return {
        "episodes": int(total("sync", "episodes")) // len(runs["sync"]),
        "episodes_per_step": episodes_per_step,
        "max_staleness": schedule.max_staleness,
        "repeats": len(runs["sync"]),
        "sync_episodes_per_s": sync_rate,
        "async_episodes_per_s": async_rate,
        "async_vs_sync": async_rate / sync_rate,
        "async_trained_episodes_per_s": total("async", "trained_episodes") / total("async", "seconds"),
        "mean_staleness": stale / tokens if tokens else 0.0,
        "max_staleness_seen": max((r.max_staleness for r in runs["async"]), default=0.0),
        "dropped_fraction": total("async", "dropped_episodes") / read if read else 0.0,
        "mixed_version_episodes": int(total("async", "mixed_version_episodes")),
        "sync_seconds": total("sync", "seconds"),
        "async_seconds": total("async", "seconds"),
        "async_in_flight": schedule.in_flight(episodes_per_step),
        "sync_busy_cores": sync_busy_cores,
        "async_busy_cores": total("async", "busy_cpu_s") / total("async", "seconds"),
        "cpu_ceiling": cpus / sync_busy_cores if sync_busy_cores else 0.0,
        "trainer_threads": threads,
        "cpus": cpus,
    }
