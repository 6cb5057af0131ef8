"""The v1 JSON API (DESIGN.md "Gateway HTTP API (v1)")."""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Depends, HTTPException, Query
from fastapi.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.background import BackgroundTask

from rlguard.gateway.deps import GatewayState, require_admin, require_episode_access, state
from rlguard.gateway.export import export
from rlguard.gateway.schemas import (
    CallRequest,
    CreateEpisodeRequest,
    CreateEpisodeResponse,
    EpisodeView,
    FinishRequest,
    FinishResponse,
    InterceptPage,
    PatchReviewPage,
    SubTrajectoryCreated,
    SubTrajectorySummary,
    SubTrajectoryUpload,
    TaskView,
    ToolAnswerBody,
    ToolCallView,
    recorded_call_fields,
)
from rlguard.gateway.services.audit import as_utc
from rlguard.gateway.services.episodes import CapacityError, EpisodeNotFound, EpisodeNotRunning
from rlguard.gateway.tasks import UnknownTaskError
from rlguard.gateway.tools import openai_tools
from store.codec import decode_action_mask
from store.models import EpisodeRow
from store.repository import DuplicateError, InterceptFilter

router = APIRouter(prefix="/v1")

_404 = {404: {"description": "No such episode"}}
_409 = {409: {"description": "The episode has ended"}}
_AUTH = {401: {"description": "Missing or invalid token"}, 403: {"description": "Token out of its scope"}}


def _not_found(episode_id: str) -> HTTPException:
    return HTTPException(404, f"no episode {episode_id!r}")


@router.get("/tools", summary="The tools the agent sees (OpenAI function-calling schemas)")
async def list_tools() -> list[dict[str, Any]]:
    return openai_tools()


@router.get("/tasks", dependencies=[Depends(require_admin)], responses=_AUTH)
async def list_tasks(gw: GatewayState = Depends(state)) -> list[TaskView]:
    return [
        TaskView(id=t.id, suite=t.suite, instructions=t.instructions, image=t.image, details=t.details)
        for t in await asyncio.to_thread(gw.episodes.catalog.list_tasks)  # may build workspace tars
    ]


@router.post(
    "/episodes",
    dependencies=[Depends(require_admin)],
    responses={**_AUTH, 404: {"description": "No such task"}, 503: {"description": "No sandbox could start"}},
)
async def create_episode(
    body: CreateEpisodeRequest, gw: GatewayState = Depends(state)
) -> CreateEpisodeResponse:
    try:
        live, token = await gw.episodes.create(body.task, body.policy_version)
    except UnknownTaskError as exc:
        raise HTTPException(404, f"no task {body.task!r}") from exc
    except CapacityError as exc:
        raise HTTPException(503, str(exc), headers={"Retry-After": "5"}) from exc
    return CreateEpisodeResponse(episode_id=live.id, agent_token=token, tools=openai_tools())


@router.post(
    "/episodes/{episode_id}/calls",
    dependencies=[Depends(require_episode_access)],
    response_model=ToolAnswerBody,
    responses={**_AUTH, **_404, **_409},
)
async def call_tool(
    episode_id: str, call: Annotated[CallRequest, Body()], gw: GatewayState = Depends(state)
) -> JSONResponse:
    """The hot path: the answer is serialised once, directly (same bytes for real and decoy)."""
    try:
        answer = await gw.episodes.call(episode_id, call)
    except EpisodeNotFound as exc:
        raise _not_found(episode_id) from exc
    except EpisodeNotRunning as exc:
        raise HTTPException(409, str(exc)) from exc
    return JSONResponse(
        {"output": answer.output, "exit_code": answer.exit_code, "truncated": answer.truncated}
    )


@router.post(
    "/episodes/{episode_id}/finish",
    dependencies=[Depends(require_episode_access)],
    responses={**_AUTH, **_404, **_409},
)
async def finish_episode(
    episode_id: str, body: FinishRequest | None = None, gw: GatewayState = Depends(state)
) -> FinishResponse:
    try:
        outcome = await gw.episodes.finish(episode_id, end_reason=body.end_reason if body else None)
    except EpisodeNotFound as exc:
        raise _not_found(episode_id) from exc
    except EpisodeNotRunning as exc:
        raise HTTPException(409, str(exc)) from exc
    return FinishResponse(reward=outcome.reward, details=outcome.details)


@router.post(
    "/episodes/{episode_id}/subtrajectories",
    dependencies=[Depends(require_episode_access)],
    responses={**_AUTH, **_404, 409: {"description": "This index was already uploaded"}},
    summary="Store one token-level sub-trajectory of an episode (rollout runner)",
)
async def upload_sub_trajectory(
    episode_id: str, body: SubTrajectoryUpload, gw: GatewayState = Depends(state)
) -> SubTrajectoryCreated:
    try:
        row = await gw.episodes.add_sub_trajectory(episode_id, body)
    except EpisodeNotFound as exc:
        raise _not_found(episode_id) from exc
    except DuplicateError as exc:
        raise HTTPException(
            409, f"sub-trajectory {body.index} of episode {episode_id} already exists"
        ) from exc
    return SubTrajectoryCreated(episode_id=episode_id, index=row.index, num_tokens=row.num_tokens)


def episode_view(row: EpisodeRow) -> EpisodeView:
    return EpisodeView(
        episode_id=row.id,
        task=row.task_id,
        policy_version=row.policy_version,
        status=row.status,
        reward=row.reward,
        sandbox_id=row.sandbox_id,
        num_calls=row.num_calls,
        created_at=row.created_at,
        last_activity_at=row.last_activity_at,
        finished_at=row.finished_at,
        details=row.details,
        tool_calls=[
            ToolCallView(
                **recorded_call_fields(c),
                exit_code=c.exit_code,
                timed_out=c.timed_out,
                guard_ms=c.guard_ms,
                exec_ms=c.exec_ms,
                total_ms=c.total_ms,
            )
            for c in row.tool_calls
        ],
        sub_trajectories=[
            SubTrajectorySummary(
                index=s.index,
                num_tokens=s.num_tokens,
                num_action_tokens=int(decode_action_mask(s.action_mask).sum()),
                policy_version=s.policy_version,
                trainable=s.trainable,
                consumed_at=s.consumed_at,
                consumed_by_step=s.consumed_by_step,
            )
            for s in row.sub_trajectories
        ],
    )


@router.get("/episodes/{episode_id}", dependencies=[Depends(require_admin)], responses={**_AUTH, **_404})
async def get_episode(episode_id: str, gw: GatewayState = Depends(state)) -> EpisodeView:
    try:
        row = await gw.episodes.episode(episode_id)
    except EpisodeNotFound as exc:
        raise _not_found(episode_id) from exc
    return episode_view(row)


@router.get("/audit/intercepts", dependencies=[Depends(require_admin)], responses=_AUTH)
async def list_intercepts(
    gw: GatewayState = Depends(state),
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


@router.get("/audit/patches", dependencies=[Depends(require_admin)], responses=_AUTH)
async def list_patch_reviews(
    gw: GatewayState = Depends(state),
    tampering_only: bool = False,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=10_000_000)] = 0,
) -> PatchReviewPage:
    """Episodes whose final patch the guard's review flagged (pytest-mode grading), newest first."""
    return await gw.audit.patch_reviews(tampering_only, limit, offset)


ExportStatus = Literal["finished", "timed_out", "interrupted", "failed"]


@router.get(
    "/export",
    dependencies=[Depends(require_admin)],
    responses={**_AUTH, 200: {"content": {"application/x-ndjson": {}, "application/vnd.apache.parquet": {}}}},
    response_class=Response,
    summary="Ended episodes as one row per sub-trajectory (JSON lines streamed, or a Parquet file)",
)
async def export_episodes(
    gw: GatewayState = Depends(state),
    format: Literal["jsonl", "parquet"] = "jsonl",
    status: Annotated[list[ExportStatus], Query()] = ["finished"],  # noqa: B006 - FastAPI default
) -> Response:
    store = gw.episodes.db.store
    statuses = tuple(status)
    if format == "jsonl":
        rows = (json.dumps(row) + "\n" for row in store.iter_export_rows(statuses))
        return StreamingResponse(rows, media_type="application/x-ndjson")
    tmp = Path(tempfile.mkdtemp(prefix="rlguard-export-"))
    out = tmp / "episodes.parquet"
    await asyncio.to_thread(export, store, out, "parquet", statuses)
    return FileResponse(
        out,
        media_type="application/vnd.apache.parquet",
        filename="episodes.parquet",
        background=BackgroundTask(shutil.rmtree, tmp, ignore_errors=True),
    )
