"""A Ray rollout worker killed mid-run (SIGKILL to its process): the run still returns every result,
the episodes the dead worker held are handed to the live one, the gateway ends the episodes the dead
worker left behind, and training reads only the clean, finished ones."""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid

import ray

from rlguard.loops.local_gateway import local_gateway
from rlguard.settings import Settings
from rollout.agent import AgentConfig
from rollout.ray_runner import run_on_ray
from rollout.runner import EpisodeSpec, RolloutSpec
from store.repository import Store


def _running(store: Store) -> int:
    from sqlalchemy import text

    with store.engine.connect() as connection:
        return connection.execute(text("SELECT count(*) FROM episodes WHERE status = 'running'")).scalar_one()


def test_a_killed_ray_worker_loses_no_episode_and_trains_nothing_unclean(tmp_path, tiny_model_dir) -> None:
    settings = Settings(
        state_dir=tmp_path,
        database_url=f"sqlite:///{tmp_path}/rlguard.db",
        instance=f"test-ray-faults-{uuid.uuid4().hex[:6]}",
        admin_token="ray-faults-admin",
    )
    settings.sandbox.warm_pool_size = 1
    settings.gateway.episode_idle_timeout_s = 6.0  # what a dead runner leaves times out quickly
    with local_gateway(settings) as gw:
        store = Store.from_url(settings.resolved_database_url)
        spec = RolloutSpec(
            gateway_url=gw.url,
            admin_token=gw.admin_token,
            policy="scripted",
            model=str(tiny_model_dir),
            config=AgentConfig(max_turns=12, context_budget_tokens=16384),
        )
        episodes = [EpisodeSpec("builtin/stats-median", "honest") for _ in range(4)]
        pids: list[int] = []
        killed: list[int] = []

        def learn_pids(workers: list) -> None:  # before any episode is queued on them
            pids.extend(ray.get([worker.pid.remote() for worker in workers]))

        def kill_worker_zero() -> None:
            """Once both workers run an episode, SIGKILL worker 0's process."""
            deadline = time.monotonic() + 300
            while (not pids or _running(store) < 2) and time.monotonic() < deadline:
                time.sleep(0.1)
            os.kill(pids[0], signal.SIGKILL)
            killed.append(pids[0])

        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        try:
            killer = threading.Thread(target=kill_worker_zero, daemon=True)
            killer.start()
            results = run_on_ray(
                spec, episodes, concurrency=2, num_workers=2, on_workers=learn_pids, with_intercepts=False
            )
            killer.join(timeout=60)
        finally:
            ray.shutdown()
        assert killed, "the worker was never killed"
        assert len(results) == 4 and all(r.status == "submitted" for r in results), [
            r.status for r in results
        ]

        # the episode the dead worker held is left to the gateway's idle timeout; nothing stays running
        deadline = time.monotonic() + 120
        while _running(store) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _running(store) == 0
        from sqlalchemy import text

        with store.engine.connect() as connection:
            rows = connection.execute(text("SELECT id, status FROM episodes")).all()
        finished = {r.episode_id for r in results}
        orphans = {episode_id: status for episode_id, status in rows if episode_id not in finished}
        assert orphans and set(orphans.values()) == {"timed_out"}  # ended by the gateway, graded
        # training reads the finished episodes with their whole trajectories, never the orphans
        trainable = {t.episode.id for t in store.trainable_episodes(100)}
        assert trainable == finished
        store.close()
