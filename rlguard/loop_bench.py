"""``rlguard bench loop``: the same budget of episodes through the sync and the async loop.

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

import os
import tempfile
from pathlib import Path
from typing import Any

from trainer.settings import TrainerSettings

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
    """Run both loops on ``episodes`` episodes (``repeats`` times each, A-B-B-A); a flat dict."""
    from rlguard.async_loop import AsyncLoopConfig, run_async_loop
    from rlguard.loop import LoopConfig, run_loop
    from rlguard.settings import get_settings

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
    root = Path(out_dir)
    threads = trainer_threads or max(1, (os.cpu_count() or 2) // 2)  # the same for both modes
    settings = TrainerSettings()
    previous = os.environ.get("RLGUARD_STATE_DIR")
    in_flight = workers or (max_staleness + 1) * episodes_per_step  # what the staleness gate admits
    totals = {"sync": [0, 0.0, 0.0], "async": [0, 0.0, 0.0]}  # episodes, seconds, busy CPU seconds
    runs: list[dict[str, Any]] = []
    try:
        # A-B-B-A: other jobs' load drifts over minutes on a shared machine; each mode gets an early
        # and a late slot, so a drift hits both alike.
        for index, mode in enumerate(("sync", "async", "async", "sync")[: 4 if repeats == 2 else 2]):
            os.environ["RLGUARD_STATE_DIR"] = str(root / f"{index}-{mode}" / "state")  # a fresh store
            get_settings.cache_clear()
            run_dir = root / f"{index}-{mode}" / "run"
            if mode == "sync":
                rounds = run_loop(
                    LoopConfig(
                        iterations=episodes // episodes_per_step,
                        episodes_per_task=episodes_per_step // len(tasks),
                        task_filter=tasks,
                        run_dir=run_dir,
                        max_turns=max_turns,
                        max_tokens_per_turn=max_tokens_per_turn,
                        server_process=True,
                        gateway_process=True,
                        trainer_threads=threads,
                    ),
                    settings,
                )
                totals["sync"][0] += sum(r["episodes"] for r in rounds)
                totals["sync"][1] += rounds[-1]["seconds"]
                totals["sync"][2] += rounds[-1]["busy_cpu_s"]
            else:
                summary = run_async_loop(
                    AsyncLoopConfig(
                        total_episodes=episodes,
                        episodes_per_step=episodes_per_step,
                        workers=in_flight,
                        queue_size=queue_size or (max_staleness + 1) * episodes_per_step,
                        max_staleness=max_staleness,
                        task_filter=tasks,
                        run_dir=run_dir,
                        max_turns=max_turns,
                        max_tokens_per_turn=max_tokens_per_turn,
                        server_process=True,
                        gateway_process=True,
                        trainer_threads=threads,
                    ),
                    settings,
                )
                totals["async"][0] += summary["episodes"]
                totals["async"][1] += summary["seconds"]
                totals["async"][2] += summary["busy_cpu_s"]
                runs.append(summary)
    finally:
        if previous is None:
            os.environ.pop("RLGUARD_STATE_DIR", None)
        else:
            os.environ["RLGUARD_STATE_DIR"] = previous
        get_settings.cache_clear()
    sync_rate = totals["sync"][0] / totals["sync"][1]
    async_rate = totals["async"][0] / totals["async"][1]
    steps = [s for r in runs for s in r["per_step"] if s["step"] is not None]
    tokens = sum(s["metrics"].get("data/action_tokens", 0.0) for s in steps)
    stale = sum(
        s["metrics"].get("data/action_tokens", 0.0) * s["metrics"].get("data/staleness_mean", 0.0)
        for s in steps
    )
    read = sum(r["trained_episodes"] + r["dropped_episodes"] for r in runs)
    cpus = os.cpu_count() or 1
    sync_busy_cores = totals["sync"][2] / totals["sync"][1]
    return {
        "episodes": episodes,
        "episodes_per_step": episodes_per_step,
        "max_staleness": max_staleness,
        "repeats": repeats,
        "sync_episodes_per_s": sync_rate,
        "async_episodes_per_s": async_rate,
        "async_vs_sync": async_rate / sync_rate,
        "async_trained_episodes_per_s": sum(r["trained_episodes"] for r in runs) / totals["async"][1],
        "mean_staleness": stale / tokens if tokens else 0.0,
        "max_staleness_seen": max((r["max_staleness"] for r in runs), default=0.0),
        "dropped_fraction": sum(r["dropped_episodes"] for r in runs) / read if read else 0.0,
        "mixed_version_episodes": sum(r["mixed_version_episodes"] for r in runs),
        "sync_seconds": totals["sync"][1],
        "async_seconds": totals["async"][1],
        "async_in_flight": in_flight,
        "sync_busy_cores": sync_busy_cores,
        "async_busy_cores": totals["async"][2] / totals["async"][1],
        "cpu_ceiling": cpus / sync_busy_cores if sync_busy_cores else 0.0,
        "trainer_threads": threads,
        "cpus": cpus,
    }
