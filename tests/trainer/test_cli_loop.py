"""The commands end to end: train from a store and reload a real policy server; plot; the closed loop."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rlguard.cli import app
from store.migrate import upgrade
from store.repository import Store
from tests.trainer.conftest import store_episode
from trainer.errors import TrainerError


@pytest.fixture(scope="session")
def tiny_rollout_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project's tiny model (with its locally built tokenizer), as the policy server loads it."""
    from rollout.tinymodel import ensure_tiny_model

    return ensure_tiny_model(tmp_path_factory.mktemp("tiny-rollout") / "model")


@pytest.fixture
def no_critic_warmup(monkeypatch):
    """Settings from the environment with no critic-only step (a one-step run that moves the policy)."""
    from rlguard.settings import get_settings

    monkeypatch.setenv("RLGUARD_TRAINER__CRITIC_WARMUP_STEPS", "0")
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def test_train_command_trains_from_store_and_reloads_the_policy_server(
    tiny_rollout_model: Path, tmp_path: Path, monkeypatch, no_critic_warmup
) -> None:
    from rlguard.settings import get_settings
    from rollout.control import TOKEN_ENV, ReloadControl, new_token
    from rollout.policy_server import build_server
    from rollout.serving import serve_in_thread

    url = f"sqlite:///{tmp_path / 'store.db'}"
    upgrade(url)
    store = Store.from_url(url)
    parts = [([11, 12, 300, 301, 13, 302], [0, 0, 1, 1, 0, 1]), ([11, 14, 303, 304], [0, 0, 1, 1])]
    for i in range(3):
        store_episode(store, f"e{i}", "builtin/lru-cache", float(i == 1), parts)
    store.close()
    run_dir = tmp_path / "run"
    token = new_token()  # the server's control token, given to the trainer by the environment
    server = build_server(str(tiny_rollout_model), control=ReloadControl(token, (run_dir / "checkpoints",)))
    monkeypatch.setenv(TOKEN_ENV, token)
    get_settings.cache_clear()
    runner = CliRunner()
    with serve_in_thread(server.app, startup_timeout_s=120) as policy_url:
        try:
            result = runner.invoke(
                app,
                ["train", "--model", str(tiny_rollout_model), "--steps", "1", "--out", str(run_dir),
                 "--database-url", url, "--policy-url", f"{policy_url}/v1", "--device", "cpu"],
            )  # fmt: skip
        finally:
            get_settings.cache_clear()
        assert result.exit_code == 0, result.output + repr(result.exception)
        assert server.version == "1" and server.reloads == 1
        assert server.engine.model_path == run_dir / "checkpoints" / "step-000001" / "actor"
    assert (server.engine.model_path / "tokenizer.json").is_file()
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    record = json.loads(lines[0])
    assert record["step"] == 1 and record["data/episodes"] == 3
    for key in ("actor/pg_loss", "critic/value_loss", "actor/entropy", "critic/explained_variance"):
        assert key in record
    assert any((run_dir / "tensorboard").iterdir())

    again = runner.invoke(app, ["train", "--model", str(tiny_rollout_model), "--out", str(run_dir),
                                "--database-url", url, "--device", "cpu"])  # fmt: skip
    assert again.exit_code == 2 and "no unconsumed" in again.stderr  # one line, not a traceback

    plotted = runner.invoke(app, ["plot", str(run_dir)])
    assert plotted.exit_code == 0, plotted.output
    assert list(run_dir.glob("*.png"))


@pytest.mark.docker
def test_closed_loop_rolls_out_trains_and_serves_the_new_policy(
    tiny_rollout_model: Path, tmp_path: Path, monkeypatch
) -> None:
    from rlguard.loops.run import run_loop
    from rlguard.loops.spec import LoopSpec, SyncSchedule
    from rlguard.settings import get_settings
    from trainer.settings import TrainerSettings

    monkeypatch.setenv("RLGUARD_STATE_DIR", str(tmp_path / "state"))
    get_settings.cache_clear()
    try:
        spec = LoopSpec(
            model=str(tiny_rollout_model),
            steps=2,
            task_filter=("lru-cache",),
            run_dir=tmp_path / "loop",
            max_turns=1,
            max_tokens_per_turn=48,
        )
        summary = run_loop(spec, SyncSchedule(), get_settings(), TrainerSettings(critic_warmup_steps=0))
        url = get_settings().resolved_database_url
    finally:
        get_settings.cache_clear()
    assert [s.step for s in summary.per_step] == [1, 2]
    assert [s.policy_version for s in summary.per_step] == [1, 2]
    assert summary.episodes == 2 and summary.schedule == "sync"
    store = Store.from_url(url)
    try:
        with store.sessions() as session:
            from sqlalchemy import select

            from store.models import EpisodeRow, SubTrajectoryRow

            versions = sorted(session.scalars(select(EpisodeRow.policy_version)))
            unconsumed = session.scalars(
                select(SubTrajectoryRow).where(SubTrajectoryRow.consumed_at.is_(None))
            )
            assert versions == ["0", "1"]  # round 2 ran on the reloaded policy
            assert list(unconsumed) == []
    finally:
        store.close()


@pytest.mark.parametrize("protocol", ["builtin", "sglang"])
def test_reload_speaks_both_dialects_and_reports_refusals(tiny_rollout_model: Path, protocol: str) -> None:
    from rollout.control import ReloadControl, new_token
    from rollout.policy_server import build_server
    from rollout.serving import serve_in_thread
    from trainer.reload import reload_policy

    token = new_token()
    control = ReloadControl(token, (tiny_rollout_model.parent,))
    server = build_server(str(tiny_rollout_model), control=control)
    with serve_in_thread(server.app, startup_timeout_s=120) as policy_url:
        answer = reload_policy(f"{policy_url}/v1", tiny_rollout_model, "7", protocol, token=token)
        assert answer["success"] and server.reloads == 1
        with pytest.raises(TrainerError, match="refused"):
            reload_policy(policy_url, tiny_rollout_model / "missing", "8", protocol, token=token)
        with pytest.raises(TrainerError, match="refused"):  # no token: 401
            reload_policy(policy_url, tiny_rollout_model, "9", protocol)
        assert server.reloads == 1


def test_run_ppo_update_for_the_demo(tiny_rollout_model: Path, tmp_path: Path) -> None:
    from trainer.train import run_ppo_update

    url = f"sqlite:///{tmp_path / 'store.db'}"
    upgrade(url)
    store = Store.from_url(url)
    store_episode(store, "e0", "builtin/lru-cache", 1.0, [([11, 12, 300, 301, 13, 302], [0, 0, 1, 1, 0, 1])])
    store.close()
    result = run_ppo_update(url, tiny_rollout_model, tmp_path / "run")
    assert result["step"] == 1 and result["sub_trajectories"] == 1
    assert (Path(result["checkpoint"]) / "model.safetensors").is_file()
    assert "critic/value_loss" in result
    assert run_ppo_update(url, tiny_rollout_model, tmp_path / "run")["step"] is None  # data consumed once
