"""Store-backed data: whole episodes, packing, and exactly-once consumption under simulated crashes."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from sqlalchemy import select

import trainer.train as train_module
from store.migrate import upgrade
from store.models import EpisodeRow, SubTrajectoryRow, TrainingStepRow
from store.repository import Store
from store.training import ConsumptionConflict
from tests.support.store_rows import tool_call
from tests.trainer.conftest import store_episode
from trainer.batch import pack_by_token_budget, padding_fraction
from trainer.data import load_step_data
from trainer.runtime import init_runtime
from trainer.settings import TrainerSettings
from trainer.train import TrainingRun

TWO_PARTS = [([2, 3, 7, 8, 4, 9], [0, 0, 1, 1, 0, 1]), ([2, 6, 5, 5], [0, 0, 1, 1])]
ONE_PART = [([2, 3, 5, 9, 4, 7, 7], [0, 0, 1, 1, 0, 1, 1])]


@pytest.fixture
def store(db_url: str):
    upgrade(db_url)
    store = Store.from_url(db_url)
    yield store
    store.close()


def consumed(store: Store) -> dict[int, int | None]:
    with store.sessions() as session:
        return {r.id: r.consumed_by_step for r in session.scalars(select(SubTrajectoryRow))}


def test_loads_whole_ended_episodes_with_their_structure(store: Store) -> None:
    store_episode(store, "e1", "suite/a", 1.0, TWO_PARTS, policy_version="3")
    store_episode(store, "e2", "suite/b", 0.0, ONE_PART, status="timed_out")
    store_episode(store, "e3", "suite/a", 0.5, ONE_PART, details={"end_reason": "max_turns"})
    store_episode(store, "e4", "suite/a", 1.0, ONE_PART, status="interrupted")  # not trainable
    data = load_step_data(store, max_episodes=10)
    assert data.episodes == 3 and len(data.samples) == 4
    first, second = data.samples[0], data.samples[1]
    assert (first.sub_index, first.is_last, second.sub_index, second.is_last) == (0, False, 1, True)
    assert list(second.input_ids) == [2, 6, 5, 5] and list(second.action_mask) == [0, 0, 1, 1]
    assert first.policy_version == 3 and first.reward == 1.0 and not first.truncated
    truncated = {s.episode_id: s.truncated for s in data.samples}
    assert truncated == {0: False, 1: True, 2: True}
    groups = {s.episode_id: s.group_id for s in data.samples}
    assert groups[0] == groups[2] != groups[1]
    assert load_step_data(store, max_episodes=1).episodes == 1


def test_end_reasons_reach_the_samples_and_infrastructure_errors_never_train(store: Store) -> None:
    store_episode(store, "ok", "suite/a", 1.0, ONE_PART, details={"end_reason": "submitted"})
    store_episode(store, "cut", "suite/a", 0.0, ONE_PART, details={"end_reason": "context_full"})
    store_episode(store, "idle", "suite/a", 0.0, ONE_PART, status="timed_out")
    store_episode(store, "broken", "suite/a", 0.0, ONE_PART, details={"end_reason": "error"})
    store_episode(store, "gap", "suite/a", 1.0, [TWO_PARTS[1]])  # index 0 missing below
    with store.sessions.begin() as session:
        session.execute(
            SubTrajectoryRow.__table__.update().where(SubTrajectoryRow.episode_id == "gap").values(index=1)
        )
    data = load_step_data(store, max_episodes=10)
    reasons = {s.episode_id: (s.end_reason, s.truncated) for s in data.samples}
    assert reasons == {0: ("submitted", False), 1: ("context_full", True), 2: ("timeout", True)}
    assert set(data.unusable) == {"broken", "gap"}
    assert data.unusable["broken"].startswith("infrastructure error")
    assert "missing" in data.unusable["gap"]
    with store.sessions() as session:
        marked = dict(session.execute(select(EpisodeRow.id, EpisodeRow.unusable_reason)).all())
    assert marked["broken"] == data.unusable["broken"] and marked["ok"] is None
    again = load_step_data(store, max_episodes=10)  # marked: never read again, cannot stall a reader
    assert again.unusable == {} and again.episodes == 3
    assert load_step_data(store, max_episodes=3).episodes == 3  # the 3 oldest usable, none crowded out


def test_run_and_policy_filters_take_a_loop_its_own_round(store: Store) -> None:
    store_episode(store, "other", "suite/a", 1.0, ONE_PART, run="someone-else", policy_version="0")
    store_episode(store, "mine-0", "suite/a", 1.0, ONE_PART, run="me", policy_version="0")
    store_episode(store, "mine-1", "suite/a", 0.0, TWO_PARTS, run="me", policy_version="1")
    store_episode(store, "anon", "suite/a", 0.0, ONE_PART)
    ids = lambda found: [f.episode.id for f in found]  # noqa: E731
    assert ids(store.trainable_episodes(10)) == ["other", "mine-0", "mine-1", "anon"]
    assert ids(store.trainable_episodes(10, run="me")) == ["mine-0", "mine-1"]
    assert ids(store.trainable_episodes(10, run="me", policy_versions=["1"])) == ["mine-1"]
    assert ids(store.trainable_episodes(10, policy_versions=["0"])) == ["other", "mine-0", "anon"]
    data = load_step_data(store, 1, run="me", policy_versions=["1"])
    assert data.episodes == 1 and len(data.samples) == 2


def record_calls(store: Store, episode_id: str, actions: list[str]) -> None:
    store.record_calls([tool_call(episode_id, seq, action) for seq, action in enumerate(actions)])


def test_an_intercept_penalty_charges_each_decoyed_call_and_leaves_the_grade_stored(store: Store) -> None:
    store_episode(store, "cheat", "suite/a", 1.0, TWO_PARTS)
    record_calls(store, "cheat", ["allow", "decoy", "flag", "decoy"])
    store_episode(store, "tests", "suite/a", 1.0, ONE_PART)
    record_calls(store, "tests", ["flag", "allow"])  # an honest agent writing a test: not charged
    store_episode(store, "caught", "suite/a", 0.0, ONE_PART)
    record_calls(store, "caught", ["decoy"])

    plain = load_step_data(store, max_episodes=10)
    assert [s.reward for s in plain.samples] == [1.0, 1.0, 1.0, 0.0] and plain.decoyed_calls == 3
    charged = load_step_data(store, max_episodes=10, intercept_penalty=0.3)
    rewards = {(s.episode_id, s.sub_index): s.reward for s in charged.samples}
    assert rewards == pytest.approx({(0, 0): 0.4, (0, 1): 0.4, (1, 0): 1.0, (2, 0): -0.3})  # no floor
    with store.sessions() as session:
        stored = dict(session.execute(select(EpisodeRow.id, EpisodeRow.reward)).all())
    assert stored == {"cheat": 1.0, "tests": 1.0, "caught": 0.0}


def test_a_step_trains_on_the_charged_reward(
    store: Store, db_url: str, tiny_model_dir: Path, tmp_path: Path
) -> None:
    store_episode(store, "cheat", "suite/a", 1.0, ONE_PART)
    record_calls(store, "cheat", ["decoy", "decoy"])
    store_episode(store, "honest", "suite/a", 1.0, ONE_PART)
    settings = TrainerSettings(actor_lr=1e-3, critic_warmup_steps=0, intercept_penalty=0.5)
    run = TrainingRun(
        tmp_path / "run", tiny_model_dir, db_url, settings, init_runtime(device="cpu"), tensorboard=False
    )
    result = run.step(max_episodes=10)
    run.close()
    assert result is not None
    assert result.metrics["data/decoyed_calls_per_episode"] == 1.0
    assert result.metrics["data/reward_mean"] == pytest.approx(0.5)  # (1 - 2 x 0.5 + 1) / 2


def test_commit_is_atomic_and_refuses_double_consumption(store: Store) -> None:
    store_episode(store, "e1", "suite/a", 1.0, TWO_PARTS)
    store_episode(store, "e2", "suite/a", 0.0, ONE_PART)
    data = load_step_data(store, max_episodes=10)
    step_id = store.commit_training_step("run", 1, "1", "/ckpt/1", data.record_ids[:2])
    assert sorted(v for v in consumed(store).values() if v is not None) == [step_id, step_id]
    with pytest.raises(ConsumptionConflict):
        store.commit_training_step("run", 2, "2", "/ckpt/2", data.record_ids)  # overlaps step 1
    assert store.latest_training_step("run").step == 1  # the failed commit left no training_steps row
    assert list(consumed(store).values()).count(None) == 1
    assert load_step_data(store, max_episodes=10).record_ids == data.record_ids[2:]


def test_packing_bounds_padding_and_respects_budget() -> None:
    lengths = [100, 7, 64, 65, 3, 30, 31, 99, 12, 50]
    batches = pack_by_token_budget(lengths, token_budget=200)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for batch in batches:
        assert len(batch) * max(lengths[i] for i in batch) <= 200 or len(batch) == 1
    assert padding_fraction(lengths, batches) < 0.25
    assert pack_by_token_budget([500], token_budget=100) == [[0]]


def test_crash_between_training_and_commit_neither_skips_nor_repeats_data(
    store: Store, db_url: str, tiny_model_dir: Path, tmp_path: Path, monkeypatch
) -> None:
    for i in range(3):
        store_episode(store, f"e{i}", "suite/a", float(i % 2), TWO_PARTS)
    settings = TrainerSettings(actor_lr=1e-3, critic_lr=1e-3, critic_warmup_steps=0)

    def open_run() -> TrainingRun:  # a fresh trainer process
        return TrainingRun(
            tmp_path / "run", tiny_model_dir, db_url, settings, init_runtime(device="cpu"), tensorboard=False
        )

    run = open_run()

    def crash(*args, **kwargs):
        raise RuntimeError("killed between training and commit")

    monkeypatch.setattr(run.store, "commit_training_step", crash)
    with pytest.raises(RuntimeError, match="killed"):
        run.step(max_episodes=10)
    run.close()
    assert all(v is None for v in consumed(store).values())  # trained, not committed: not consumed
    assert store.latest_training_step(run.run_name) is None
    monkeypatch.undo()

    run = open_run()
    assert run.trainer.step == 0  # resumed from the last *committed* state, which had not seen the data
    result = run.step(max_episodes=10)
    assert result is not None and result.step == 1
    run.close()
    step_row = store.latest_training_step(run.run_name)
    assert set(consumed(store).values()) == {step_row.id}  # every row consumed, exactly by step 1

    # a crash after the commit (e.g. while reloading the policy) resumes after the data
    store_episode(store, "e9", "suite/a", 1.0, ONE_PART)
    run = open_run()
    assert run.trainer.step == 1 and run.trainer.policy_version == 1
    monkeypatch.setattr(train_module, "make_weight_sync", lambda *a, **k: SimpleNamespace(push=crash))
    run.policy_url = "http://127.0.0.1:9/v1"
    with pytest.raises(RuntimeError):
        run.step(max_episodes=10)
    run.close()
    monkeypatch.undo()
    run = open_run()
    assert run.trainer.step == 2
    assert run.step(max_episodes=10) is None  # nothing left: e9 was trained on exactly once
    run.close()
    with store.sessions() as session:
        steps = session.scalars(select(TrainingStepRow.step).order_by(TrainingStepRow.step)).all()
    assert steps == [1, 2]


def test_a_grpo_step_leaves_out_and_marks_a_group_left_with_one_episode(
    store: Store, db_url: str, tiny_model_dir: Path, tmp_path: Path
) -> None:
    store_episode(store, "a1", "suite/a", 1.0, ONE_PART)
    store_episode(store, "a2", "suite/a", 0.0, ONE_PART)
    store_episode(store, "b1", "suite/b", 1.0, ONE_PART)  # its sibling ended in an infrastructure error
    store_episode(store, "b2", "suite/b", 0.0, ONE_PART, details={"end_reason": "error"})
    settings = TrainerSettings(algo="grpo", actor_lr=1e-3)
    run = TrainingRun(
        tmp_path / "run", tiny_model_dir, db_url, settings, init_runtime(device="cpu"), tensorboard=False
    )
    result = run.step(max_episodes=10)
    run.close()
    assert result is not None
    assert result.metrics["data/episodes"] == 2 and result.metrics["data/group_size_min"] == 2
    assert result.metrics["data/small_group_episodes"] == 1 and result.metrics["data/unusable_episodes"] == 1
    with store.sessions() as session:
        marked = dict(session.execute(select(EpisodeRow.id, EpisodeRow.unusable_reason)).all())
    assert marked["a1"] is None and marked["b2"].startswith("infrastructure error")
    assert "task group" in marked["b1"]
