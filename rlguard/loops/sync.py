"""The synchronous schedule: play a step's episodes, train on exactly those, reload, repeat.

Every step's episodes run on the policy the previous step produced (the server reloads the
committed checkpoint before the next step starts), and the trainer is handed that step's episode
ids, so it trains on its own round and nothing older left in the store.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from rlguard.loops.cpu_meter import busy_cpu_seconds
from rlguard.loops.services import LoopServices
from rlguard.loops.summary import EpisodeOutcome, LoopSummary, StepSummary, summarize
from rollout.runner import EpisodeSpec, RolloutContext, run_episodes


async def run_sync(
    plan: list[list[EpisodeSpec]],
    services: LoopServices,
    on_step: Callable[[StepSummary], None] | None = None,
) -> LoopSummary:
    """The steps on one rollout context (tokenizer, tasks, HTTP pools are built once, not per step);
    the trainer steps on this event loop, as nothing else is in flight between steps."""
    run = services.run
    ctx = RolloutContext(services.rollout, version_source=lambda: str(run.trainer.policy_version))
    outcomes: list[EpisodeOutcome] = []
    steps: list[StepSummary] = []
    started = time.perf_counter()  # servers up: from here on, rollout and training only
    cpu_started = busy_cpu_seconds()
    try:
        for episodes in plan:
            results = await run_episodes(ctx, episodes, len(episodes), with_intercepts=False)
            outcomes += [
                EpisodeOutcome(r.status, r.reward, [t.versions for t in r.sub_trajectories]) for r in results
            ]
            trainable = [r.episode_id for r in results if r.episode_id and r.sub_trajectories]
            step = run.step(max_episodes=len(trainable), episode_ids=trainable) if trainable else None
            rewards = [r.reward for r in results if r.reward is not None]
            summary = StepSummary(
                step=step.step if step else None,
                episodes=len(results),
                policy_version=run.trainer.policy_version,
                mean_reward=sum(rewards) / len(rewards) if rewards else 0.0,
                seconds=time.perf_counter() - started,
                metrics=step.metrics if step else {},
            )
            steps.append(summary)
            if on_step is not None:
                on_step(summary)
    finally:
        await ctx.aclose()
    elapsed = time.perf_counter() - started
    return summarize("sync", outcomes, steps, run, elapsed, busy_cpu_seconds() - cpu_started)
