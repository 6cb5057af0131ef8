"""Group commit: concurrent records land in few transactions, each caller waits for its own commit,
and a row that cannot be stored fails only its own caller."""

from __future__ import annotations

import asyncio

import pytest

from gateway.core.dbrunner import DbRunner
from gateway.core.recorder import CallRecorder
from store.migrate import upgrade
from store.models import EpisodeRow, ToolCallRow, utcnow
from store.repository import Store


def _row(episode_id: str, seq: int) -> ToolCallRow:
    return ToolCallRow(
        episode_id=episode_id, seq=seq, tool="bash", arguments={}, normalized="", action="allow",
        stage="rules", rule_id=None, category=None, confidence=1.0, reason="", answer_output=str(seq),
        answer_exit_code=0, answer_truncated=False, was_decoy=False, exit_code=0, timed_out=False,
        guard_ms=0.0, exec_ms=0.0, total_ms=0.0, created_at=utcnow(),
    )  # fmt: skip


@pytest.fixture
def db(tmp_path):
    url = f"sqlite:///{tmp_path / 'rec.db'}"
    upgrade(url)
    store = Store.from_url(url)
    store.upsert_task("s/t", "s", "", "", {})
    for i in range(8):
        now = utcnow()
        store.create_episode(
            EpisodeRow(id=f"e{i}", task_id="s/t", status="running", agent_token_hash=f"h{i}", num_calls=0,
                       created_at=now, last_activity_at=now, details={})
        )  # fmt: skip
    runner = DbRunner(store, url)
    yield runner
    runner.close()


async def test_concurrent_records_are_batched_and_all_committed(db: DbRunner, monkeypatch) -> None:
    transactions = []
    original = db.store.record_calls

    def counting(rows):
        transactions.append(len(rows))
        original(rows)

    monkeypatch.setattr(db.store, "record_calls", counting)
    recorder = CallRecorder(db)
    await asyncio.gather(*(recorder.record(_row(f"e{i % 8}", i // 8)) for i in range(80)))
    assert sum(transactions) == 80 and len(transactions) < 80  # grouped
    for i in range(8):
        row = db.store.episode(f"e{i}", with_children=True)
        assert row.num_calls == 10 and [c.seq for c in row.tool_calls] == list(range(10))


async def test_a_bad_row_fails_only_its_own_caller(db: DbRunner) -> None:
    recorder = CallRecorder(db)
    await recorder.record(_row("e0", 0))
    results = await asyncio.gather(
        recorder.record(_row("e1", 0)),
        recorder.record(_row("e0", 0)),  # duplicate call number: cannot be stored
        recorder.record(_row("e2", 0)),
        return_exceptions=True,
    )
    assert results[0] is None and results[2] is None
    assert isinstance(results[1], Exception)
    assert [db.store.episode(e).num_calls for e in ("e0", "e1", "e2")] == [1, 1, 1]
