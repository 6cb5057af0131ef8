"""The demo's episode step: what `rlguard export` then yields is complete, in the configured database."""

import os
from pathlib import Path

import pytest

from rlguard.demo import print_demo_report, run_demo_rollouts
from rlguard.settings import Settings
from store.repository import Store


def test_demo_rollouts_store_compacted_intercepted_consistent_episodes(tmp_path: Path, capsys) -> None:
    settings = Settings(
        state_dir=tmp_path,
        database_url=f"sqlite:///{tmp_path}/demo.db",
        instance=f"test-demo-{os.getpid()}",
        admin_token="demo-test-token",
    )
    settings.sandbox.warm_pool_size = 1
    report = run_demo_rollouts(settings, concurrency=3, tasks=["builtin/bank-ledger"])

    behaviours = sorted(spec.behaviour for spec, _ in report.results)
    assert behaviours == ["cheat", "honest", "honest_long"]
    rewards = {spec.behaviour: result.reward for spec, result in report.results}
    assert rewards["honest"] == rewards["honest_long"] == 1.0 and rewards["cheat"] < 1.0
    assert sum(report.intercepts.values()) >= 2 and all(stage == "rules" for _, stage in report.intercepts)
    totals = print_demo_report(report)
    printed = capsys.readouterr().out
    assert all(category in printed for category, _ in report.intercepts)

    rows = list(Store.from_url(settings.resolved_database_url).iter_export_rows())
    episodes = {r["episode_id"] for r in rows}
    assert len(episodes) == 3 and len(rows) > len(episodes) == totals["episodes"]
    assert any(r["intercepts"] > 0 for r in rows)
    for row in rows:
        assert len(row["token_ids"]) == len(row["action_mask"]) == len(row["logprobs"])
        assert all(
            (bit == 0) == (lp == 0.0) for bit, lp in zip(row["action_mask"], row["logprobs"], strict=True)
        )
    generated = {result.episode_id: result.generated_tokens for _, result in report.results}
    for episode_id, n in generated.items():
        assert sum(sum(r["action_mask"]) for r in rows if r["episode_id"] == episode_id) == n


@pytest.mark.postgres
def test_demo_rollouts_honour_a_postgres_database_url(tmp_path: Path, pg_database: str) -> None:
    settings = Settings(
        state_dir=tmp_path,
        database_url=pg_database,
        instance=f"test-demo-pg-{os.getpid()}",
        admin_token="demo-test-token",
    )
    settings.sandbox.warm_pool_size = 1
    report = run_demo_rollouts(settings, concurrency=2, tasks=["builtin/stats-median"])

    ids = {result.episode_id for _, result in report.results}
    assert len(ids) == 2
    rows = [r for r in Store.from_url(pg_database).iter_export_rows() if r["episode_id"] in ids]
    assert {r["episode_id"] for r in rows} == ids
    assert {r["reward"] for r in rows} == {result.reward for _, result in report.results}
