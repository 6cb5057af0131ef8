"""Episodes a person can see: ``GET /v1/episodes`` (filters, pages) and
``GET /v1/episodes/{id}/trajectory`` (turn by turn, with reward, tests and the calls). Admin only."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, HTTPException, Query

from gateway.deps import Gateway, GatewayState, require_admin
from gateway.errors import EpisodeNotFound
from gateway.routers.responses import AUTH, NOT_FOUND
from gateway.schemas import EpisodePage, TrajectoryView
from gateway.services.audit import as_utc
from gateway.services.episode_views import EpisodeViews
from store.repository import EpisodeFilter

router = APIRouter(prefix="/v1", dependencies=[Depends(require_admin)], responses=AUTH)

Status = Literal["running", "finished", "timed_out", "interrupted", "failed"]


def views(gw: GatewayState) -> EpisodeViews:
    return EpisodeViews(gw.episodes.db, gw.proxy.decoder if gw.proxy is not None else None)


@router.get("/episodes", summary="Episodes, newest first, with reward, counts and whether they can train")
async def list_episodes(
    gw: Gateway,
    status: Status | None = None,
    task: Annotated[str | None, Query(max_length=200)] = None,
    policy_version: Annotated[str | None, Query(max_length=200)] = None,
    since: Annotated[datetime | None, Query(description="ISO 8601; naive means UTC")] = None,
    trainable: Annotated[bool | None, Query(description="true: has sub-trajectories; false: none")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    offset: Annotated[int, Query(ge=0, le=10_000_000)] = 0,
) -> EpisodePage:
    try:
        since_utc = None if since is None else as_utc(since)
    except ValueError as exc:
        raise HTTPException(422, f"since: {exc}") from exc
    filters = EpisodeFilter(
        status=status, task=task, policy_version=policy_version, since=since_utc, trainable=trainable
    )
    return await views(gw).page(filters, limit, offset)


@router.get("/episodes/{episode_id}/trajectory", responses=NOT_FOUND, summary="An episode turn by turn")
async def episode_trajectory(episode_id: str, gw: Gateway) -> TrajectoryView:
    try:
        return await views(gw).trajectory(episode_id)
    except EpisodeNotFound as exc:
        raise HTTPException(404, f"no episode {episode_id!r}") from exc
