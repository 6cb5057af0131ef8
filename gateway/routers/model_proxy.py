"""``/v1/episodes/{id}/model/v1``: the episode's OpenAI-compatible model endpoint (recording proxy).

A harness uses it as its model base URL with the episode's agent token as API key: chat and text
completions (streamed as server-sent events when asked, the record complete before the first
event), and the model list. Errors answer in OpenAI's error shape, so clients show the message.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from gateway.deps import Gateway, require_episode_access
from gateway.errors import EpisodeNotFound, EpisodeNotRunning
from gateway.routers.responses import AUTH, ENDED, NOT_FOUND
from gateway.services.model_proxy import ModelProxy, ProxyAnswer, ProxyError
from gateway.services.openai_wire import chat_chunks, completion_chunks

router = APIRouter(
    prefix="/v1/episodes/{episode_id}/model/v1",
    dependencies=[Depends(require_episode_access)],
    responses={**AUTH, **NOT_FOUND, **ENDED},
    tags=["model proxy"],
)


def _error(status: int, message: str) -> JSONResponse:
    kind = "invalid_request_error" if status < 500 else "upstream_error"
    return JSONResponse({"error": {"message": message, "type": kind, "code": status}}, status_code=status)


def _proxy(gw: Any) -> ModelProxy:
    if gw.proxy is None:
        raise ProxyError(404, "this gateway was built without a model proxy")
    return gw.proxy


async def _body(request: Request) -> Any:
    try:
        return json.loads(await request.body())
    except ValueError as exc:
        raise ProxyError(400, f"the request body is not JSON: {exc}") from exc


async def _answer(call: Any, chunks: Any) -> Response:
    try:
        answer: ProxyAnswer = await call
    except ProxyError as exc:
        return _error(exc.status, str(exc))
    except EpisodeNotFound as exc:
        return _error(404, f"no episode {exc}")
    except EpisodeNotRunning as exc:
        return _error(409, str(exc))
    if answer.stream:
        return StreamingResponse(
            chunks(answer.body, answer.include_usage),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache"},
        )
    return JSONResponse(answer.body)


@router.post("/chat/completions", summary="A chat turn, sampled by the policy with token ids recorded")
async def chat_completions(episode_id: str, request: Request, gw: Gateway) -> Response:
    try:
        proxy, body = _proxy(gw), await _body(request)
    except ProxyError as exc:
        return _error(exc.status, str(exc))
    return await _answer(proxy.chat(episode_id, body), chat_chunks)


@router.post("/completions", summary="A text completion, sampled by the policy with token ids recorded")
async def completions(episode_id: str, request: Request, gw: Gateway) -> Response:
    try:
        proxy, body = _proxy(gw), await _body(request)
    except ProxyError as exc:
        return _error(exc.status, str(exc))
    return await _answer(proxy.complete(episode_id, body), completion_chunks)


@router.get("/models", summary="The policy server's models")
async def models(episode_id: str, gw: Gateway) -> Response:
    try:
        return JSONResponse(await _proxy(gw).models())
    except ProxyError as exc:
        return _error(exc.status, str(exc))
