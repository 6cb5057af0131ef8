"""Audit queries shared by the JSON API, the web page and the CLI."""

from __future__ import annotations

from rlguard.gateway.dbrunner import DbRunner
from rlguard.gateway.schemas import InterceptPage, InterceptView, recorded_call_fields
from store.repository import Intercept, InterceptFilter, InterceptStats


def intercept_view(item: Intercept) -> InterceptView:
    call = item.call
    return InterceptView(
        **recorded_call_fields(call),
        id=call.id,
        episode_id=call.episode_id,
        task=item.task_id,
        policy_version=item.policy_version,
    )


class AuditService:
    def __init__(self, db: DbRunner) -> None:
        self.db = db

    async def intercepts(self, filters: InterceptFilter, limit: int, offset: int) -> InterceptPage:
        rows = await self.db.run(self.db.store.intercepts, filters, limit=limit + 1, offset=offset)
        has_more = len(rows) > limit
        return InterceptPage(
            items=[intercept_view(r) for r in rows[:limit]], next_offset=offset + limit if has_more else None
        )

    async def stats(self) -> InterceptStats:
        return await self.db.run(self.db.store.intercept_stats)
