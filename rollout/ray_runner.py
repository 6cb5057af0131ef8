"""Fan episodes out over a Ray cluster: one async actor per worker, each with its own context.

Each ``RolloutWorker`` actor builds a ``RolloutContext`` once (tokenizer, tasks, gateway client,
policy client or scripted scorer) and runs up to ``concurrency`` episodes at once on its event loop.
The driver hands episodes out round-robin and collects results as they finish, which keeps the
progress bar live. Workers need the gateway and the policy URLs to be reachable from their nodes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rollout.agent import EpisodeResult
from rollout.runner import EpisodeSpec, RolloutContext, RolloutSpec, count_intercepts, run_one


class _Worker:
    """The actor's body (wrapped with ``ray.remote`` at run time so importing needs no Ray)."""

    def __init__(self, spec: RolloutSpec) -> None:
        self.ctx = RolloutContext(spec)

    async def run(self, episode: EpisodeSpec, with_intercepts: bool) -> tuple[EpisodeResult, int]:
        result = await run_one(self.ctx, episode)
        intercepts = await count_intercepts(self.ctx.gateway, result) if with_intercepts else 0
        return result, intercepts

    async def close(self) -> None:
        await self.ctx.aclose()


def init_ray(address: str, num_cpus: int | None = None) -> None:
    """Connect to ``address`` (``ray://…``, ``host:port``, ``auto``), or start a local one for ``local``."""
    import ray

    if ray.is_initialized():
        return
    if address == "local":
        ray.init(num_cpus=num_cpus or 2, include_dashboard=False, log_to_driver=False)
    else:
        ray.init(address=address, log_to_driver=False)


def run_on_ray(
    spec: RolloutSpec,
    episodes: list[EpisodeSpec],
    concurrency: int,
    num_workers: int = 2,
    on_done: Callable[[EpisodeResult, int], None] | None = None,
    with_intercepts: bool = True,
) -> list[EpisodeResult]:
    """Run ``episodes`` on ``num_workers`` actors (Ray must be initialised); results in input order."""
    import ray

    per_worker = max(1, -(-concurrency // num_workers))
    actor = ray.remote(num_cpus=0)(_Worker).options(max_concurrency=per_worker)
    workers = [actor.remote(spec) for _ in range(num_workers)]
    try:
        pending: dict[Any, int] = {
            workers[i % num_workers].run.remote(episode, with_intercepts): i
            for i, episode in enumerate(episodes)
        }
        results: list[EpisodeResult | None] = [None] * len(episodes)
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                result, intercepts = ray.get(ref)
                result.details.setdefault("intercepts", intercepts)
                results[pending.pop(ref)] = result
                if on_done is not None:
                    on_done(result, intercepts)
        ray.get([w.close.remote() for w in workers])
    finally:
        for worker in workers:
            ray.kill(worker)
    return [r for r in results if r is not None]
