"""The audit API: intercepted calls and reviewed patches, filtered and paged (admin only)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Query

from gateway.deps import Gateway, require_admin
from gateway.routers.responses import AUTH
from gateway.schemas import InterceptPage, PatchReviewPage
from gateway.services.audit import as_utc
from store.repository import InterceptFilter

router = APIRouter(prefix="/v1")


@router.get("/audit/intercepts", dependencies=[Depends(require_admin)], responses=AUTH)
async def list_intercepts(
    gw: Gateway,
    category: Annotated[str | None, Query(max_length=64)] = None,
    stage: Annotated[str | None, Query(max_length=16)] = None,
    episode_id: Annotated[str | None, Query(max_length=64)] = None,
    policy_version: Annotated[str | None, Query(max_length=200)] = None,
    since: Annotated[datetime | None, Query(description="ISO 8601; naive means UTC")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=10_000_000)] = 0,
) -> InterceptPage:
    try:
        since_utc = None if since is None else as_utc(since)
    except ValueError as exc:
        raise HTTPException(422, f"since: {exc}") from exc
    filters = InterceptFilter(
        category=category,
        stage=stage,
        episode_id=episode_id,
        policy_version=policy_version,
        since=since_utc,
    )
    return await gw.audit.intercepts(filters, limit, offset)


@router.get("/audit/patches", dependencies=[Depends(require_admin)], responses=AUTH)
async def list_patch_reviews(
    gw: Gateway,
    tampering_only: bool = False,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=10_000_000)] = 0,
) -> PatchReviewPage:
    """Episodes whose final patch the guard's review flagged (pytest-mode grading), newest first."""
    return await gw.audit.patch_reviews(tampering_only, limit, offset)
