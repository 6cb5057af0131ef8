"""``GET /v1/episodes/{id}/presence``: held open by a harness adapter for its episode's life; when
it closes while the episode still runs, the episode is finished (``gateway.services.presence``)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, HTTPException
from fastapi.responses import StreamingResponse

from gateway.deps import Gateway, require_episode_access
from gateway.errors import EpisodeNotFound, EpisodeNotRunning
from gateway.routers.responses import AUTH, ENDED, NOT_FOUND

router = APIRouter(prefix="/v1")


@router.get(
    "/episodes/{episode_id}/presence",
    dependencies=[Depends(require_episode_access)],
    responses={**AUTH, **NOT_FOUND, **ENDED, 200: {"content": {"text/event-stream": {}}}},
    response_class=StreamingResponse,
    summary="Hold open while the harness lives: a closed connection finishes the running episode",
    include_in_schema=False,  # an endless stream for the adapters, not a request/answer operation
)
async def presence(episode_id: str, gw: Gateway) -> StreamingResponse:
    if gw.presence is None:
        raise HTTPException(503, "this gateway was built without presence watching")
    try:
        await gw.episodes.live.running(episode_id)
    except EpisodeNotFound as exc:
        raise HTTPException(404, f"no episode {episode_id!r}") from exc
    except EpisodeNotRunning as exc:
        raise HTTPException(409, str(exc)) from exc
    beats = gw.presence.heartbeats(episode_id)
    return StreamingResponse(beats, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
