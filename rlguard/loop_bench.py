"""``rlguard bench loop``: the same budget of episodes through the sync and the async loop.

Both run the tiny model on built-in tasks through the real gateway (Docker sandboxes), with the policy
server and the gateway in their own processes, the same episodes per training step, the same number
of episodes in flight and the same torch threads for the trainer (half the cores: with more, the
trainer's OpenMP threads spin against the rollout's processes). Each is timed from the moment its
servers (and, async, its rollout process) are up to its last training step; start-up is left out.
``async_vs_sync`` is the ratio of episodes per second. What bounds it: per round the sync loop
spends ``rollout + train + reload``, the async loop about ``max(rollout, train + reload)``, so the
ratio is at most ``1 + min/max`` of the two phases (2 when they are equal), less the pipeline's
fill and drain, and less again as the phases compete for this machine's two cores.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from trainer.settings import TrainerSettings

DEFAULT_TASKS = ("lru-cache", "roman-numerals")


def run_loop_bench(
    episodes: int = 16,
    episodes_per_step: int = 2,
    max_staleness: int = 1,
    max_turns: int = 2,
    max_tokens_per_turn: int = 48,
    tasks: tuple[str, ...] = DEFAULT_TASKS,
    queue_size: int | None = None,
    out_dir: Path | None = None,
    trainer_threads: int | None = None,
) -> dict[str, Any]:
    """Run both loops on ``episodes`` episodes; the comparison as a flat dict of numbers."""
    from rlguard.async_loop import AsyncLoopConfig, run_async_loop
    from rlguard.loop import LoopConfig, run_loop
    from rlguard.settings import get_settings

    if episodes < 2 * episodes_per_step:
        raise ValueError(f"need at least two steps' episodes ({2 * episodes_per_step}), got {episodes}")
    if episodes_per_step % len(tasks):
        raise ValueError(
            f"episodes_per_step ({episodes_per_step}) must be a multiple of the {len(tasks)} tasks"
        )
    root = Path(out_dir or tempfile.mkdtemp(prefix="rlguard-bench-loop-"))
    threads = trainer_threads or max(1, (os.cpu_count() or 2) // 2)  # the same for both modes
    settings = TrainerSettings()
    previous = os.environ.get("RLGUARD_STATE_DIR")
    results: dict[str, Any] = {}
    try:
        for mode in ("sync", "async"):
            os.environ["RLGUARD_STATE_DIR"] = str(root / mode / "state")  # a fresh store per mode
            get_settings.cache_clear()
            if mode == "sync":
                rounds = run_loop(
                    LoopConfig(
                        iterations=episodes // episodes_per_step,
                        episodes_per_task=episodes_per_step // len(tasks),
                        task_filter=tasks,
                        run_dir=root / mode / "run",
                        max_turns=max_turns,
                        max_tokens_per_turn=max_tokens_per_turn,
                        server_process=True,
                        gateway_process=True,
                        trainer_threads=threads,
                    ),
                    settings,
                )
                played = sum(r["episodes"] for r in rounds)
                results["sync"] = {"episodes": played, "seconds": rounds[-1]["seconds"]}
            else:
                summary = run_async_loop(
                    AsyncLoopConfig(
                        total_episodes=episodes,
                        episodes_per_step=episodes_per_step,
                        workers=episodes_per_step,
                        queue_size=queue_size or (max_staleness + 1) * episodes_per_step,
                        max_staleness=max_staleness,
                        task_filter=tasks,
                        run_dir=root / mode / "run",
                        max_turns=max_turns,
                        max_tokens_per_turn=max_tokens_per_turn,
                        server_process=True,
                        gateway_process=True,
                        trainer_threads=threads,
                    ),
                    settings,
                )
                results["async"] = summary
    finally:
        if previous is None:
            os.environ.pop("RLGUARD_STATE_DIR", None)
        else:
            os.environ["RLGUARD_STATE_DIR"] = previous
        get_settings.cache_clear()
    sync_rate = results["sync"]["episodes"] / results["sync"]["seconds"]
    run = results["async"]
    return {
        "episodes": episodes,
        "episodes_per_step": episodes_per_step,
        "max_staleness": max_staleness,
        "sync_episodes_per_s": sync_rate,
        "async_episodes_per_s": run["episodes_per_s"],
        "async_vs_sync": run["episodes_per_s"] / sync_rate,
        "async_trained_episodes_per_s": run["trained_episodes"] / run["seconds"],
        "mean_staleness": run["mean_staleness"],
        "dropped_fraction": run["dropped_fraction"],
        "mixed_version_episodes": run["mixed_version_episodes"],
        "async_steps": run["steps"],
        "sync_seconds": results["sync"]["seconds"],
        "async_seconds": run["seconds"],
        "trainer_threads": threads,
        "cpus": os.cpu_count(),
    }
