"""Group commit of tool-call records: each call still waits for its own record to be durable.

Calls that arrive while a commit is running are written together by the next one, so with many
concurrent episodes the single SQLite writer commits once per batch instead of once per call.
Nothing is acknowledged early: ``record`` returns only after the transaction holding that row has
committed, which is what lets a SIGKILLed gateway lose no answered call.
"""

from __future__ import annotations

import asyncio
import logging

from gateway.core.dbrunner import DbRunner
from store.models import ToolCallRow

log = logging.getLogger("gateway.core.recorder")

MAX_BATCH = 256


class CallRecorder:
    def __init__(self, db: DbRunner) -> None:
        self.db = db
        self._pending: list[tuple[ToolCallRow, asyncio.Future[None]]] = []
        self._flusher: asyncio.Task[None] | None = None

    async def record(self, row: ToolCallRow) -> None:
        """Return once ``row`` is committed; raise what its transaction raised."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.append((row, done))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush(), name="rlguard-call-recorder")
        await asyncio.shield(done)  # a cancelled caller must not cancel the others' commit

    async def _flush(self) -> None:
        while self._pending:
            batch, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
            try:
                await self.db.run(self.db.store.record_calls, [row for row, _ in batch])
            except Exception:
                await self._one_by_one(batch)  # only the row that cannot be stored fails
                continue
            for _, done in batch:
                if not done.done():
                    done.set_result(None)

    async def _one_by_one(self, batch: list[tuple[ToolCallRow, asyncio.Future[None]]]) -> None:
        for row, done in batch:
            try:
                await self.db.run(self.db.store.record_calls, [row])
            except Exception as exc:
                log.exception("a call record could not be stored", extra={"episode_id": row.episode_id})
                if not done.done():
                    done.set_exception(exc)
            else:
                if not done.done():
                    done.set_result(None)
