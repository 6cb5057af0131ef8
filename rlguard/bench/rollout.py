"""``rlguard bench rollout``: the runner's throughput and its own overhead per turn.

A scripted policy (teacher-forced by the tiny model) runs the built-in suite through an in-process
gateway (SQLite in a temporary directory, the local Docker engine). The overhead per turn is the
runner's wall time for a turn minus the time inside the policy and inside gateway calls: rendering,
token bookkeeping, parsing, compaction checks and scheduling.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from rlguard.loops.local_gateway import local_gateway
from rlguard.settings import Settings, get_settings
from rollout.agent import AgentConfig
from rollout.runner import RolloutContext, RolloutSpec, run_episodes
from rollout.tinymodel import default_tiny_model_dir, ensure_tiny_model


def run_bench(episodes: int = 32, concurrency: int = 16) -> dict[str, Any]:

    with tempfile.TemporaryDirectory(prefix="rlguard-bench-rollout-") as tmp:
        settings = Settings(state_dir=Path(tmp), database_url=f"sqlite:///{tmp}/bench.db")
        settings.sandbox.warm_pool_size = min(concurrency, 16)
        with local_gateway(settings) as gateway:
            spec = RolloutSpec(
                gateway_url=gateway.url,
                admin_token=gateway.admin_token,
                model=str(ensure_tiny_model(default_tiny_model_dir(get_settings().state_dir))),
                policy="scripted",
                config=AgentConfig(max_turns=20, context_budget_tokens=8192),
            )

            async def main() -> tuple[list[Any], float]:
                ctx = RolloutContext(spec)
                try:
                    per_task = max(1, -(-episodes // len(ctx.tasks)))
                    specs = ctx.episode_specs(per_task)[:episodes]
                    started = time.perf_counter()
                    results = await run_episodes(ctx, specs, concurrency, with_intercepts=False)
                    return results, time.perf_counter() - started
                finally:
                    await ctx.aclose()

            results, wall = asyncio.run(main())
    overhead = [ms for r in results for ms in r.overhead_ms]
    turns = sum(r.turns for r in results)
    calls = sum(r.tool_calls for r in results)
    return {
        "episodes": len(results),
        "concurrency": concurrency,
        "wall_s": round(wall, 3),
        "episodes_per_s": len(results) / wall,
        "calls_per_s": calls / wall,
        "turns": turns,
        "overhead_ms_per_turn_p50": statistics.median(overhead) if overhead else 0.0,
        "overhead_ms_per_turn_p90": statistics.quantiles(overhead, n=10)[-1] if len(overhead) > 1 else 0.0,
        "model_s_per_turn_mean": sum(r.model_s for r in results) / max(turns, 1),
        "gateway_s_per_call_mean": sum(r.gateway_s for r in results) / max(calls, 1),
        "errors": sum(r.status == "error" for r in results),
    }
