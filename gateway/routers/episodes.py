"""An episode's life over HTTP: create, call, finish, upload sub-trajectories, read.

Each route makes one service call and maps the gateway's errors to status codes: unknown task or
episode 404, ended episode 409 (its ``status`` in the body: ``infra_error`` tells a runner to run
the task again), an episode another gateway runs 421 (``owner``, ``owner_url`` in the body and a
``Location`` to send it to; ``rollout.gateway_client`` follows it), no sandbox 503.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Depends, HTTPException
from fastapi.responses import JSONResponse

from contract.calls import CallRequest, ToolAnswer
from contract.tools import openai_tools
from contract.trajectory import SubTrajectoryUpload
from gateway.deps import Gateway, require_admin, require_episode_access
from gateway.errors import (
    CapacityError,
    EpisodeElsewhere,
    EpisodeNotFound,
    EpisodeNotRunning,
    UnknownTaskError,
)
from gateway.routers.responses import AUTH, ELSEWHERE, ENDED, NOT_FOUND
from gateway.schemas import (
    CreateEpisodeRequest,
    CreateEpisodeResponse,
    EpisodeView,
    FinishRequest,
    FinishResponse,
    SubTrajectoryCreated,
)
from store.repository import DuplicateError

router = APIRouter(prefix="/v1")


def _not_found(episode_id: str) -> HTTPException:
    return HTTPException(404, f"no episode {episode_id!r}")


def _ended(exc: EpisodeNotRunning) -> JSONResponse:
    return JSONResponse(status_code=409, content={"detail": str(exc), "status": exc.status})


def _elsewhere(exc: EpisodeElsewhere, path: str) -> JSONResponse:
    """421 Misdirected Request: the episode runs on another gateway; the body and ``Location`` name it."""
    headers = {"Location": exc.owner_url.rstrip("/") + path} if exc.owner_url else None
    content = {"detail": str(exc), "owner": exc.owner, "owner_url": exc.owner_url}
    return JSONResponse(status_code=421, content=content, headers=headers)


@router.post(
    "/episodes",
    dependencies=[Depends(require_admin)],
    responses={**AUTH, 404: {"description": "No such task"}, 503: {"description": "No sandbox could start"}},
)
async def create_episode(
    body: CreateEpisodeRequest, gw: Gateway
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
    response_model=ToolAnswer,
    responses={**AUTH, **NOT_FOUND, **ENDED, **ELSEWHERE},
)
async def call_tool(
    episode_id: str, call: Annotated[CallRequest, Body()], gw: Gateway
) -> JSONResponse:
    """The hot path: the answer is serialised once, directly (same bytes for real and decoy)."""
    try:
        answer = await gw.episodes.call(episode_id, call)
    except EpisodeNotFound as exc:
        raise _not_found(episode_id) from exc
    except EpisodeNotRunning as exc:
        return _ended(exc)
    except EpisodeElsewhere as exc:
        return _elsewhere(exc, f"/v1/episodes/{episode_id}/calls")
    return JSONResponse(
        {"output": answer.output, "exit_code": answer.exit_code, "truncated": answer.truncated}
    )


@router.post(
    "/episodes/{episode_id}/finish",
    dependencies=[Depends(require_episode_access)],
    responses={**AUTH, **NOT_FOUND, **ENDED, **ELSEWHERE},
    response_model=FinishResponse,
)
async def finish_episode(
    episode_id: str, gw: Gateway, body: FinishRequest | None = None
) -> FinishResponse | JSONResponse:
    try:
        outcome = await gw.episodes.finish(episode_id, end_reason=body.end_reason if body else None)
    except EpisodeNotFound as exc:
        raise _not_found(episode_id) from exc
    except EpisodeNotRunning as exc:
        return _ended(exc)
    except EpisodeElsewhere as exc:
        return _elsewhere(exc, f"/v1/episodes/{episode_id}/finish")
    return FinishResponse(reward=outcome.reward, details=outcome.details)


@router.post(
    "/episodes/{episode_id}/subtrajectories",
    dependencies=[Depends(require_episode_access)],
    responses={**AUTH, **NOT_FOUND, 409: {"description": "This index was already uploaded"}},
    summary="Store one token-level sub-trajectory of an episode (rollout runner)",
)
async def upload_sub_trajectory(
    episode_id: str, body: SubTrajectoryUpload, gw: Gateway
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


@router.get("/episodes/{episode_id}", dependencies=[Depends(require_admin)], responses={**AUTH, **NOT_FOUND})
async def get_episode(episode_id: str, gw: Gateway) -> EpisodeView:
    try:
        row = await gw.episodes.episode(episode_id)
    except EpisodeNotFound as exc:
        raise _not_found(episode_id) from exc
    return EpisodeView.from_row(row)
