"""Fan episodes out over a Ray cluster: one async actor per worker, each with its own context.

Each ``RolloutWorker`` actor builds a ``RolloutContext`` once (tokenizer, tasks, gateway client,
policy client or scripted scorer) and runs up to ``concurrency`` episodes at once on its event loop.
The driver hands episodes out round-robin and collects results as they finish, which keeps the
progress bar live. Workers need the gateway and the policy URLs to be reachable from their nodes.

A worker that dies (its node lost, its process killed) fails only the episodes it held: each is
handed once to a live worker as a new episode. The gateway episodes the dead worker had started
are left to the gateway's idle timeout; they never uploaded a trajectory (uploads come last), so
training never reads them.
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

    def pid(self) -> int:
        """The worker's process id (operators and the fault tests kill workers by it)."""
        import os

        return os.getpid()


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
    on_workers: Callable[[list[Any]], None] | None = None,
) -> list[EpisodeResult]:
    """Run ``episodes`` on ``num_workers`` actors (Ray must be initialised); results in input order.
    ``on_workers`` is handed the actor handles once they exist (monitoring, fault tests)."""
    import ray
    from ray.exceptions import RayActorError

    per_worker = max(1, -(-concurrency // num_workers))
    actor = ray.remote(num_cpus=0)(_Worker).options(max_concurrency=per_worker)
    workers = [actor.remote(spec) for _ in range(num_workers)]
    if on_workers is not None:
        on_workers(list(workers))
    dead: set[int] = set()
    handed_again: set[int] = set()
    try:
        pending: dict[Any, tuple[int, int]] = {
            workers[i % num_workers].run.remote(episode, with_intercepts): (i, i % num_workers)
            for i, episode in enumerate(episodes)
        }
        results: list[EpisodeResult | None] = [None] * len(episodes)
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                index, worker = pending.pop(ref)
                try:
                    result, intercepts = ray.get(ref)
                except RayActorError as exc:
                    dead.add(worker)
                    alive = [w for w in range(num_workers) if w not in dead]
                    if alive and index not in handed_again:
                        handed_again.add(index)
                        chosen = alive[index % len(alive)]
                        again = workers[chosen].run.remote(episodes[index], with_intercepts)
                        pending[again] = (index, chosen)
                        continue
                    error = f"rollout worker died: {type(exc).__name__}"
                    result = EpisodeResult(episodes[index].task_id, status="error", error=error)
                    intercepts = 0
                result.details.setdefault("intercepts", intercepts)
                results[index] = result
                if on_done is not None:
                    on_done(result, intercepts)
        for index, worker_handle in enumerate(workers):
            if index not in dead:
                try:
                    ray.get(worker_handle.close.remote())
                except RayActorError:  # died after its last episode: nothing of it to close
                    pass
    finally:
        for worker in workers:
            ray.kill(worker)
    return [r for r in results if r is not None]
