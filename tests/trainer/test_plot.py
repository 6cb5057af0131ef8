"""``rlguard plot`` of a one-step training run (the demo's shape): every panel shows its point with a
marker, the reward panels come first, the rewards of the run's episodes are a histogram read from
the store, and the figure says the load it was drawn under. A real store and a real PPO step."""

from __future__ import annotations

from pathlib import Path

from store.codec import encode_action_mask, encode_logprobs, encode_token_ids
from store.migrate import upgrade
from store.models import EpisodeRow, EpisodeStatus, SubTrajectoryRow, utcnow
from store.repository import Store
from trainer.plot import episode_rewards, metrics_figure, plot_run, read_records
from trainer.train import run_ppo_update

REWARDS = [0.0, 0.5, 1.0, 1.0]


def _store_with_episodes(url: str) -> None:
    upgrade(url)
    store = Store.from_url(url)
    try:
        store.upsert_task("builtin/plot", "builtin", "plot me", "image", {})
        for number, reward in enumerate(REWARDS):
            now = utcnow()
            episode_id = f"plot-{number}"
            store.create_episode(
                EpisodeRow(id=episode_id, task_id="builtin/plot", status=EpisodeStatus.RUNNING.value,
                           agent_token_hash=f"hash-{number}", num_calls=0, created_at=now,
                           last_activity_at=now, details={})
            )  # fmt: skip
            ids, mask = [2, 3, 4, 5, 6, 7, 8, 9], [0, 0, 0, 1, 1, 1, 0, 1]
            store.add_sub_trajectory(
                SubTrajectoryRow(episode_id=episode_id, index=0, num_tokens=len(ids),
                                 token_ids=encode_token_ids(ids), action_mask=encode_action_mask(mask),
                                 logprobs=encode_logprobs([-1.0 * b for b in mask]), trainable=True,
                                 created_at=now)
            )  # fmt: skip
            store.end_episode(
                episode_id, EpisodeStatus.FINISHED, reward=reward, details={"end_reason": "submitted"}
            )
    finally:
        store.close()


def test_a_one_step_run_plots_every_panel_reward_first(tmp_path: Path, tiny_model_dir: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    _store_with_episodes(url)
    run = tmp_path / "run"
    assert run_ppo_update(url, tiny_model_dir, run, max_episodes=10)["step"] is not None

    [png] = plot_run(run, url)
    assert png.name == "metrics.png" and png.stat().st_size > 10_000
    rewards = episode_rewards(run, url)
    assert sorted(rewards) == sorted(REWARDS)
    fig = metrics_figure(read_records(run), rewards)
    axes = [ax for ax in fig.axes if ax.axison]
    assert axes[0].get_title() == f"reward per episode ({len(REWARDS)} episodes)"
    assert sum(patch.get_height() for patch in axes[0].patches) == len(REWARDS)
    assert "reward" in axes[1].get_title()
    for ax in axes[1:]:  # one step: one visible point per panel, never an empty panel
        [line] = ax.get_lines()
        assert line.get_marker() == "o" and len(line.get_xdata()) == 1, ax.get_title()
    assert any("load average" in text.get_text() for text in fig.texts)


def test_no_store_or_another_run_means_no_histogram(tmp_path: Path) -> None:
    assert episode_rewards(tmp_path, f"sqlite:///{tmp_path / 'missing.db'}") == []
    fig = metrics_figure([{"step": i, "loss": 1.0 / (i + 1), "data/reward_mean": 0.1 * i} for i in range(40)])
    axes = [ax for ax in fig.axes if ax.axison]
    assert axes[0].get_title() == "data/reward_mean"
    assert all(ax.get_lines()[0].get_marker() in ("None", None, "") for ax in axes)  # long runs: lines
