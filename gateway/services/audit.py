"""Audit queries shared by the JSON API, the web page and the CLI."""

from __future__ import annotations

from datetime import UTC, datetime

from gateway.core.dbrunner import DbRunner
from gateway.schemas import (
    InterceptPage,
    InterceptView,
    PatchReviewPage,
    PatchReviewView,
    recorded_call_fields,
)
from store.models import EpisodeRow
from store.repository import Intercept, InterceptFilter, InterceptStats


def as_utc(value: datetime) -> datetime:
    """``value`` in UTC (naive means UTC); ValueError when the conversion leaves the datetime range
    (``0001-01-01T00:00+14:00``), which would otherwise surface as a server error in the query."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise ValueError(f"{value.isoformat()} is out of range in UTC") from None


def parse_since(text: str) -> datetime:
    """An ISO 8601 ``since`` filter as an aware UTC datetime; ValueError naming what is wrong."""
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{text!r} is not an ISO 8601 time (e.g. 2026-01-31T12:00)") from None
    return as_utc(parsed)


def intercept_view(item: Intercept) -> InterceptView:
    call = item.call
    return InterceptView(
        **recorded_call_fields(call),
        id=call.id,
        episode_id=call.episode_id,
        task=item.task_id,
        policy_version=item.policy_version,
    )


def patch_review_view(row: EpisodeRow) -> PatchReviewView:
    details = row.details or {}
    review = details.get("patch_review") or {}
    return PatchReviewView(
        episode_id=row.id,
        task=row.task_id,
        policy_version=row.policy_version,
        finished_at=row.finished_at,
        reward=row.reward,
        graded_reward=details.get("graded_reward", row.reward),
        flag=str(details.get("patch_flag", "")),
        policy=review.get("policy"),
        findings=list(review.get("findings") or []),
        patch=str(details.get("patch", "")),
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

    async def patch_reviews(self, tampering_only: bool, limit: int, offset: int) -> PatchReviewPage:
        rows = await self.db.run(
            self.db.store.patch_reviews, tampering_only=tampering_only, limit=limit + 1, offset=offset
        )
        has_more = len(rows) > limit
        return PatchReviewPage(
            items=[patch_review_view(r) for r in rows[:limit]],
            next_offset=offset + limit if has_more else None,
        )

    async def stats(self) -> InterceptStats:
        return await self.db.run(self.db.store.intercept_stats)
