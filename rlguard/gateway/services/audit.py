"""Audit queries shared by the JSON API, the web page and the CLI."""

from __future__ import annotations

from rlguard.gateway.dbrunner import DbRunner
from rlguard.gateway.schemas import InterceptPage, InterceptView, ToolAnswerBody
from rlguard.store.repository import Intercept, InterceptFilter, InterceptStats


def intercept_view(item: Intercept) -> InterceptView:
    call = item.call
    return InterceptView(
        id=call.id,
        episode_id=call.episode_id,
        task=item.task_id,
        policy_version=item.policy_version,
        seq=call.seq,
        tool=call.tool,
        arguments=call.arguments,
        normalized=call.normalized,
        action=call.action,
        stage=call.stage,
        rule_id=call.rule_id,
        category=call.category,
        confidence=call.confidence,
        reason=call.reason,
        answer=ToolAnswerBody(
            output=call.answer_output, exit_code=call.answer_exit_code, truncated=call.answer_truncated
        ),
        was_decoy=call.was_decoy,
        created_at=call.created_at,
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
