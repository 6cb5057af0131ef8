"""``rlguard loop --mode async`` end to end: the tiny model on built-in tasks through real Docker."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select
from typer.testing import CliRunner

from rlguard.async_loop import AsyncLoopConfig
from rlguard.cli import app
from store.models import EpisodeRow, SubTrajectoryRow
from store.repository import Store


def test_async_config_refuses_bad_shapes() -> None:
    with pytest.raises(ValueError, match="queue_size"):
        AsyncLoopConfig(episodes_per_step=4, queue_size=2)
    with pytest.raises(ValueError, match="workers"):
        AsyncLoopConfig(workers=0)


@pytest.mark.docker
def test_async_loop_trains_while_rolling_out_and_records_versions(tmp_path: Path, monkeypatch) -> None:
    from rlguard.settings import get_settings

    monkeypatch.setenv("RLGUARD_STATE_DIR", str(tmp_path / "state"))
    get_settings.cache_clear()
    try:
        result = CliRunner().invoke(
            app,
            ["loop", "--mode", "async", "--episodes", "6", "--episodes-per-step", "2", "--workers", "2",
             "--max-staleness", "1", "--task", "lru-cache", "--max-turns", "2", "--max-tokens-per-turn", "24",
             "--out", str(tmp_path / "run"), "--json"],
        )  # fmt: skip
        url = get_settings().resolved_database_url
    finally:
        get_settings.cache_clear()
    assert result.exit_code == 0, result.output + repr(result.exception)
    import json

    summary = json.loads(result.output[result.output.index("{") :])
    assert summary["episodes"] == 6 and summary["steps"] >= 2
    assert summary["policy_version"] == summary["steps"]
    assert summary["max_staleness"] <= 1 and summary["mean_staleness"] <= 1
    assert summary["queue_high_water"] <= 4  # the bound: (K + 1) x episodes per step
    store = Store.from_url(url)
    try:
        with store.sessions() as session:
            versions = set(session.scalars(select(EpisodeRow.policy_version)))
            rows = list(session.scalars(select(SubTrajectoryRow)))
    finally:
        store.close()
    assert "0" in versions and len(versions) >= 2  # later episodes ran on pushed weights
    assert rows and all(r.version_spans for r in rows)  # every generated span carries its version
    for row in rows:
        assert all(int(v) <= summary["policy_version"] for _, _, v in row.version_spans)
    assert all(r.consumed_at is not None for r in rows)  # trained on, or dropped as too stale
