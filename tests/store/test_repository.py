"""Repository behaviour on SQLite and PostgreSQL: calls, episode ends, sub-trajectories, audit, export."""

from __future__ import annotations

import threading
from datetime import timedelta

import numpy as np
import pytest

from store.codec import (
    decode_action_mask,
    decode_logprobs,
    decode_token_ids,
    encode_action_mask,
    encode_logprobs,
    encode_token_ids,
)
from store.models import EpisodeRow, EpisodeStatus, SubTrajectoryRow, utcnow
from store.repository import DuplicateError, InterceptFilter, Store
from tests.support.store_rows import tool_call


def _episode(store: Store, episode_id: str, policy_version: str | None = "v1", task: str = "s/t") -> None:
    store.upsert_task(task, task.split("/")[0], "do it", "img", {})
    now = utcnow()
    store.create_episode(
        EpisodeRow(
            id=episode_id,
            task_id=task,
            policy_version=policy_version,
            status=EpisodeStatus.RUNNING.value,
            agent_token_hash=episode_id.ljust(64, "0"),
            sandbox_id=f"sb-{episode_id}",
            num_calls=0,
            created_at=now,
            last_activity_at=now,
            details={},
        )
    )


def _sub(episode_id: str, index: int, n: int = 5, trainable: bool = True) -> SubTrajectoryRow:
    return SubTrajectoryRow(
        episode_id=episode_id,
        index=index,
        num_tokens=n,
        token_ids=encode_token_ids(range(100, 100 + n)),
        action_mask=encode_action_mask([i % 2 for i in range(n)]),
        logprobs=encode_logprobs([-0.5] * n),
        policy_version="v1",
        trainable=trainable,
        created_at=utcnow(),
    )


def test_codec_round_trips_compactly() -> None:
    ids = [0, 1, 151_643, 2**31 - 1]
    blob = encode_token_ids(ids)
    assert len(blob) == 16 and decode_token_ids(blob).tolist() == ids
    assert decode_action_mask(encode_action_mask([1, 0, 1])).tolist() == [1, 0, 1]
    assert np.allclose(decode_logprobs(encode_logprobs([-0.25, -3.5])), [-0.25, -3.5])


def test_record_call_counts_and_orders_calls(store: Store) -> None:
    _episode(store, "e1")
    for seq in range(3):
        store.record_call(tool_call("e1", seq))
    row = store.episode("e1", with_children=True)
    assert row is not None and row.num_calls == 3
    assert [c.seq for c in row.tool_calls] == [0, 1, 2]
    assert row.tool_calls[1].arguments == {"command": "echo 1"}
    assert row.created_at.tzinfo is not None


def test_same_call_number_twice_is_refused_whole(store: Store) -> None:
    _episode(store, "e1")
    store.record_call(tool_call("e1", 0))
    with pytest.raises(Exception):  # noqa: B017 - the driver's IntegrityError class differs per backend
        store.record_call(tool_call("e1", 0))
    row = store.episode("e1")
    assert row is not None and row.num_calls == 1  # the episode counter rolled back with the insert


def test_end_episode_only_from_running(store: Store) -> None:
    _episode(store, "e1")
    assert store.end_episode("e1", EpisodeStatus.FINISHED, reward=0.5, details={"passed": 1})
    assert not store.end_episode("e1", EpisodeStatus.TIMED_OUT)
    row = store.episode("e1")
    assert row is not None and (row.status, row.reward, row.details) == ("finished", 0.5, {"passed": 1})


def test_sub_trajectories_unique_per_index(store: Store) -> None:
    _episode(store, "e1")
    store.add_sub_trajectory(_sub("e1", 0))
    store.add_sub_trajectory(_sub("e1", 1, trainable=False))
    with pytest.raises(DuplicateError):
        store.add_sub_trajectory(_sub("e1", 0))
    row = store.episode("e1", with_children=True)
    assert [(s.index, s.trainable) for s in row.sub_trajectories] == [(0, True), (1, False)]
    assert decode_token_ids(row.sub_trajectories[0].token_ids).tolist() == [100, 101, 102, 103, 104]


def test_intercepts_filter_and_stats(store: Store) -> None:
    _episode(store, "e1", policy_version="v1")
    _episode(store, "e2", policy_version="v2")
    store.record_call(tool_call("e1", 0))
    store.record_call(tool_call("e1", 1, "decoy", "answer_fetch"))
    store.record_call(tool_call("e2", 0, "decoy", "test_tampering", stage="judge"))
    store.record_call(tool_call("e2", 1, "flag", "git_history_leak"))
    everything = store.intercepts(InterceptFilter(), limit=10)
    assert [(i.call.episode_id, i.call.seq) for i in everything] == [("e2", 1), ("e2", 0), ("e1", 1)]
    assert [
        i.call.category for i in store.intercepts(InterceptFilter(category="answer_fetch"), limit=10)
    ] == ["answer_fetch"]
    assert [i.call.seq for i in store.intercepts(InterceptFilter(stage="judge"), limit=10)] == [0]
    assert {i.policy_version for i in store.intercepts(InterceptFilter(policy_version="v2"), limit=10)} == {
        "v2"
    }
    assert len(store.intercepts(InterceptFilter(episode_id="e1"), limit=10)) == 1
    assert store.intercepts(InterceptFilter(since=utcnow() + timedelta(hours=1)), limit=10) == []
    assert len(store.intercepts(InterceptFilter(), limit=2, offset=2)) == 1
    stats = store.intercept_stats()
    assert (stats.total_calls, stats.intercepted) == (4, 3)
    assert {r.key: r.intercepted for r in stats.by_category} == {
        "answer_fetch": 1,
        "git_history_leak": 1,
        "test_tampering": 1,
    }
    assert {r.key: (r.calls, r.intercepted, r.rate) for r in stats.by_policy_version} == {
        "v1": (2, 1, 0.5),
        "v2": (2, 2, 1.0),
    }


def test_export_rows_layout(store: Store) -> None:
    _episode(store, "e1")
    _episode(store, "e2")
    store.add_sub_trajectory(_sub("e1", 1, n=3))
    store.add_sub_trajectory(_sub("e1", 0, n=2))
    store.add_sub_trajectory(_sub("e2", 0))
    store.record_call(tool_call("e1", 0, "decoy", "answer_fetch"))
    store.record_call(tool_call("e1", 1, "flag", "test_tampering"))  # ran for real: not decoyed
    store.end_episode("e1", EpisodeStatus.FINISHED, reward=0.75)
    rows = list(store.iter_export_rows())
    assert [(r["episode_id"], r["sub_index"]) for r in rows] == [("e1", 0), ("e1", 1)]  # e2 still running
    assert rows[1] == {
        "episode_id": "e1",
        "sub_index": 1,
        "task": "s/t",
        "policy_version": "v1",
        "token_ids": [100, 101, 102],
        "action_mask": [0, 1, 0],
        "logprobs": [-0.5, -0.5, -0.5],
        "reward": 0.75,
        "intercepts": 2,
        "decoyed_calls": 1,
        "status": "finished",
        "version_spans": None,
        "is_last": True,
        "end_reason": None,
        "trainable": True,
        "drift": None,
        "model": None,
        "tokenizer": None,
        "messages": None,
    }
    assert rows[0]["is_last"] is False


def test_export_rows_carry_the_version_of_each_token_span(store: Store) -> None:
    _episode(store, "e1")
    mixed = _sub("e1", 0, n=6)
    mixed.version_spans = [[1, 2, "v1"], [3, 6, "v2"]]
    store.add_sub_trajectory(mixed)
    store.end_episode("e1", EpisodeStatus.FINISHED, reward=1.0)
    (row,) = list(store.iter_export_rows())
    assert row["version_spans"] == [
        {"start": 1, "end": 2, "version": "v1"},
        {"start": 3, "end": 6, "version": "v2"},
    ]


def test_concurrent_first_upserts_of_a_task_all_succeed(store: Store) -> None:
    barrier = threading.Barrier(6)
    errors: list[BaseException] = []

    def upsert(i: int) -> None:
        barrier.wait()
        try:
            store.upsert_task("race/t", "race", f"v{i}", "img", {"i": i})
        except BaseException as exc:  # pragma: no cover - the failure this test looks for
            errors.append(exc)

    threads = [threading.Thread(target=upsert, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []


def test_patch_reviews_lists_flagged_episodes_newest_first(store: Store) -> None:
    """The audit's list of reviewed patches: only episodes whose details carry a patch flag."""
    flags = {"clean": None, "old-cheat": "tampering", "odd": "suspect", "new-cheat": "tampering"}
    for offset, (episode_id, flag) in enumerate(flags.items()):
        _episode(store, episode_id)
        details = {"reason": "graded", "patch": f"diff {episode_id}"}
        if flag:
            details.update(patch_flag=flag, patch_review={"findings": [{"rule_id": "r"}], "policy": "zero"})
        store.end_episode(
            episode_id,
            EpisodeStatus.FINISHED,
            reward=0.0,
            details=details,
            at=utcnow() + timedelta(seconds=offset),
        )
    assert [row.id for row in store.patch_reviews(limit=10)] == ["new-cheat", "odd", "old-cheat"]
    assert [row.id for row in store.patch_reviews(tampering_only=True, limit=10)] == [
        "new-cheat",
        "old-cheat",
    ]
    assert [row.id for row in store.patch_reviews(limit=1, offset=1)] == ["odd"]
