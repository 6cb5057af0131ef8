"""Staleness of asynchronous data: per-token versions, drop or TIS beyond K, counted in the metrics."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from store.codec import encode_action_mask, encode_logprobs, encode_token_ids
from store.migrate import upgrade
from store.models import EpisodeRow, EpisodeStatus, SubTrajectoryRow
from store.repository import Store
from tests.trainer.conftest import two_part_episodes
from trainer.batch import Sample, collate
from trainer.data import load_step_data
from trainer.ppo import PPOTrainer
from trainer.runtime import init_runtime
from trainer.settings import TrainerSettings
from trainer.staleness import apply_staleness
from trainer.train import TrainingRun


def sample(episode: int, versions: list[int] | None, version: int = 0) -> Sample:
    return Sample(
        input_ids=[2, 3, 5, 5, 4, 5],
        action_mask=[0, 0, 1, 1, 0, 1],
        logprobs=[0, 0, -1.0, -1.0, 0, -1.0],
        episode_id=episode,
        sub_index=0,
        is_last=True,
        truncated=False,
        reward=1.0,
        group_id=0,
        policy_version=version,
        token_versions=versions,
    )


def test_episodes_older_than_k_are_dropped_whole_and_counted() -> None:
    samples = [
        sample(0, None, version=3),  # fresh
        sample(1, [0, 0, 2, 2, 0, 3], version=2),  # mixed: spans of versions 2 and 3 (a partial rollout)
        sample(2, [0, 0, 1, 1, 0, 3], version=1),  # its oldest span is 2 versions old
        replace(sample(2, None, version=3), sub_index=1),  # the same episode's later row is fresh
    ]
    report = apply_staleness(samples, current_version=3, max_staleness=1, mode="drop")
    assert [s.episode_id for s in report.kept] == [0, 1]
    assert [(s.episode_id, s.sub_index) for s in report.dropped] == [(2, 0), (2, 1)]
    m = report.metrics
    assert m["data/dropped_episodes"] == 1 and m["data/dropped_fraction"] == pytest.approx(1 / 3)
    assert m["data/staleness_max"] == 1  # over the trained tokens
    assert m["data/staleness_mean"] == pytest.approx((0 + 0 + 0 + 1 + 1 + 0) / 6)
    assert m["data/mixed_version_fraction"] == pytest.approx(2 / 4)


def test_mask_mode_keeps_every_episode_and_counts_the_masked_tokens() -> None:
    """The default: an episode that ran long while the weights moved keeps its fresh spans; only its
    tokens older than K leave the policy loss (and the staleness of what trains stays <= K)."""
    samples = [
        sample(0, None, version=3),
        sample(2, [0, 0, 1, 1, 0, 3], version=1),  # two tokens 2 versions old, one fresh
        replace(sample(2, None, version=3), sub_index=1),
    ]
    report = apply_staleness(samples, current_version=3, max_staleness=1)
    assert report.kept == samples and report.dropped == []
    m = report.metrics
    assert m["data/dropped_episodes"] == 0 and m["data/masked_tokens"] == 2
    assert m["data/masked_token_fraction"] == pytest.approx(2 / 9) and m["data/masked_episodes"] == 1
    assert m["data/staleness_max"] == 0 and m["data/staleness_mean"] == 0


def test_tis_mode_keeps_old_episodes_and_no_bound_keeps_all() -> None:
    samples = [sample(0, [0, 0, 0, 0, 0, 0], version=0), sample(1, None, version=5)]
    assert len(apply_staleness(samples, 5, 1, mode="tis").kept) == 2
    assert apply_staleness(samples, 5, 1, mode="tis").metrics["data/dropped_episodes"] == 0
    assert apply_staleness(samples, 5, 1, mode="tis").metrics["data/masked_tokens"] == 0
    assert len(apply_staleness(samples, 5, None).kept) == 2
    with pytest.raises(ValueError, match="max_staleness"):
        apply_staleness(samples, 5, -1)
    with pytest.raises(ValueError, match="drop"):
        apply_staleness(samples, 5, 1, mode="keep")  # type: ignore[arg-type]


def test_stale_and_expired_tokens_are_marked_and_expired_ones_leave_the_policy_loss(tiny_model_dir) -> None:
    mixed = sample(0, [0, 0, 1, 1, 0, 3], version=1)
    batch = collate([mixed], [0], pad_id=0, current_version=3, max_staleness=1)
    assert batch.stale.tolist() == [[False, False, True, True, False, False]]
    assert batch.expired.tolist() == [[False, False, True, True, False, False]]  # 2 versions old > K=1
    settings = TrainerSettings(actor_lr=1e-3, micro_batch_tokens=64, tis_cap=2.0, max_staleness=1)
    trainer = PPOTrainer.from_pretrained(tiny_model_dir, settings, init_runtime(device="cpu"))
    trainer.policy_version = 3
    scored = trainer._score([mixed], [batch], [])
    assert scored.action_mask[0].tolist() == [0, 0, 1, 1, 0, 1]
    assert scored.loss_mask[0].tolist() == [0, 0, 0, 0, 0, 1]  # the policy loss trains the fresh token
    assert 0 < float(scored.is_weights[0, 5]) <= 2.0  # min(pi_prox / pi_rollout, cap)
    assert scored.old_logprobs[0, 2] != pytest.approx(-1.0)  # anchored to the proximal policy
    metrics = trainer.train_step([mixed])
    assert metrics["data/loss_tokens"] == 1 and metrics["data/action_tokens"] == 3


@pytest.mark.parametrize("mode", ["drop", "mask"])
def test_step_drops_or_masks_too_stale_episodes_from_the_store(tiny_model_dir, tmp_path: Path, mode) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    upgrade(url)
    store = Store.from_url(url)
    store.upsert_task("suite/a", "suite", "", "", {})
    parts = two_part_episodes(PPOTrainer.from_pretrained(
        tiny_model_dir, TrainerSettings(), init_runtime(device="cpu")).actor, 1, 0)  # fmt: skip
    for name, spans in (("fresh", [[2, 4, "3"], [5, 6, "3"]]), ("mixed", [[2, 4, "2"], [5, 6, "3"]]),
                        ("old", [[2, 4, "1"], [5, 6, "2"]])):  # fmt: skip
        store.create_episode(
            EpisodeRow(id=name, task_id="suite/a", policy_version="1", agent_token_hash=name)
        )
        for index, part in enumerate(parts):
            store.add_sub_trajectory(
                SubTrajectoryRow(
                    episode_id=name, index=index, num_tokens=len(part.input_ids),
                    token_ids=encode_token_ids(list(part.input_ids)),
                    action_mask=encode_action_mask(list(part.action_mask)),
                    logprobs=encode_logprobs(list(part.logprobs)), policy_version=spans[0][2],
                    version_spans=spans if index == 0 else None,
                )
            )  # fmt: skip
        store.end_episode(name, EpisodeStatus.FINISHED, reward=1.0)
    data = load_step_data(store, 10)
    first = [s for s in data.samples if s.sub_index == 0]
    assert [s.token_versions[2:6] for s in first] == [[3, 3, 3, 3], [2, 2, 2, 3], [1, 1, 1, 2]]
    settings = TrainerSettings(
        max_staleness=1, stale_mode=mode, actor_lr=1e-4, critic_lr=1e-4, micro_batch_tokens=256
    )
    run = TrainingRun(
        tmp_path / "run", tiny_model_dir, url, settings, init_runtime(device="cpu"), tensorboard=False
    )
    run.trainer.policy_version = 3
    result = run.step(max_episodes=10)
    run.close()
    assert result is not None
    with store.sessions() as session:
        rows = {(r.episode_id, r.index): r for r in session.query(SubTrajectoryRow)}
    store.close()
    assert result.metrics["data/staleness_max"] == 1
    if mode == "mask":  # every episode trains; the old one's 2-versions-old span leaves the policy loss
        assert result.metrics["data/dropped_episodes"] == 0 and result.metrics["data/episodes"] == 3
        # sub 0: the span of version 1 (2 tokens); sub 1 (no spans: its row version, 1): both tokens
        assert result.metrics["data/masked_tokens"] == 4 and result.metrics["data/masked_episodes"] == 1
        assert all(r.consumed_by_step is not None for r in rows.values())
        return
    assert result.metrics["data/dropped_episodes"] == 1 and result.metrics["data/episodes"] == 2
    assert all(
        rows[("old", i)].consumed_at is not None and rows[("old", i)].consumed_by_step is None for i in (0, 1)
    )
    assert all(rows[(e, i)].consumed_by_step is not None for e in ("fresh", "mixed") for i in (0, 1))
