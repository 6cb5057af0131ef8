"""The demo's episode step: what `rlguard export` then yields is complete, in the configured database."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlguard.demo import demo_summary, print_demo_report, run_demo_rollouts
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
    summary = json.loads(json.dumps(demo_summary(report)))  # what --json prints, as data
    assert summary["totals"] == totals
    assert {row["behaviour"]: row["reward_mean"] for row in summary["behaviours"]} == rewards
    assert sum(item["calls"] for item in summary["intercepts"]) == sum(report.intercepts.values())

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


@pytest.mark.docker
def test_the_demo_command_prints_every_step_as_json_on_stdout(tmp_path: Path) -> None:
    """``rlguard demo --json`` as a user runs it (training and the real-world build left out for
    time): stdout is one JSON document, the tables went to stderr."""
    env = {
        **os.environ,
        "RLGUARD_STATE_DIR": str(tmp_path / "state"),
        "RLGUARD_DATABASE_URL": f"sqlite:///{tmp_path}/demo.db",
        "RLGUARD_INSTANCE": f"test-demo-cli-{os.getpid()}",
        "RLGUARD_SANDBOX__WARM_POOL_SIZE": "1",
    }
    done = subprocess.run(
        [sys.executable, "-m", "rlguard", "demo", "--json", "--skip-training", "--skip-realworld"],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert result["sandbox"]["ok"] and result["sandbox"]["tests_exit_code"] == 0
    assert result["sandbox"]["probes"] and all(p["refused"] for p in result["sandbox"]["probes"])
    rows = {row["behaviour"]: row for row in result["episodes"]["behaviours"]}
    assert rows["honest"]["reward_mean"] == 1.0 and rows["cheat"]["reward_mean"] < 1.0
    assert rows["cheat"]["intercepted"] > 0 and result["episodes"]["intercepts"]
    assert result["episodes"]["totals"]["episodes"] == sum(r["episodes"] for r in rows.values())
    assert result["training"] is None and "demo.db" in result["database"]
    assert "Episodes (scripted policy)" in done.stderr and "Episodes" not in done.stdout
