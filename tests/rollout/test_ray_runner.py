"""The Ray path: episodes fanned out to actors on a local Ray instance, stored like local ones."""

import ray

from rollout.agent import AgentConfig
from rollout.ray_runner import run_on_ray
from rollout.runner import EpisodeSpec, RolloutSpec
from tests.rollout.helpers import stored_rows


def test_episodes_run_on_local_ray_actors(gateway, tiny_model_dir, store) -> None:
    spec = RolloutSpec(
        gateway_url=gateway.url,
        admin_token=gateway.admin_token,
        policy="scripted",
        model=str(tiny_model_dir),
        config=AgentConfig(max_turns=12, context_budget_tokens=16384),
    )
    episodes = [EpisodeSpec("builtin/stats-median", "honest"), EpisodeSpec("builtin/stats-median", "cheat")]
    seen = []
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        results = run_on_ray(
            spec, episodes, concurrency=2, num_workers=2, on_done=lambda r, n: seen.append(n)
        )
    finally:
        ray.shutdown()
    assert [r.status for r in results] == ["submitted", "submitted"]
    assert results[0].reward == 1.0 and results[1].reward < 1.0
    assert len(seen) == 2
    for result in results:
        rows = stored_rows(store, result.episode_id)
        assert len(rows) == 1 and sum(rows[0]["action_mask"]) == result.generated_tokens
