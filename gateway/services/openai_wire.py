"""The OpenAI wire format the model proxy speaks to harnesses: request bodies, answers, stream chunks.

Requests are read leniently (unknown fields are ignored, as OpenAI-compatible servers do, so any
client's extras pass) but checked where it matters: one choice per request, bounded token counts.
Answers follow OpenAI's ``chat.completion`` / ``text_completion`` objects and, on request
(``return_token_ids``), carry vLLM's ``prompt_token_ids`` / ``token_ids`` fields.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from gateway.services.chat_render import Reply

SAMPLING_EXTRAS = ("presence_penalty", "frequency_penalty", "repetition_penalty", "top_k", "min_p")
MAX_STOP = 16


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    temperature: float | None = Field(None, ge=0.0, le=10.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    seed: int | None = None
    stop: str | list[str] | None = None
    n: int = Field(1, ge=1, le=1, description="One choice per request: each turn is one sample")
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    return_token_ids: bool = False
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    top_k: int | None = None
    min_p: float | None = None

    def stops(self) -> list[str]:
        stops = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        return stops[:MAX_STOP]

    def sampling(self, max_tokens: int) -> dict[str, Any]:
        """What the policy server is asked for besides the prompt."""
        values: dict[str, Any] = {"max_tokens": max_tokens}
        for name in ("temperature", "top_p", "seed", *SAMPLING_EXTRAS):
            value = getattr(self, name)
            if value is not None:
                values[name] = value
        if self.stops():
            values["stop"] = self.stops()
        return values

    @property
    def include_usage(self) -> bool:
        return bool((self.stream_options or {}).get("include_usage"))


class ChatRequest(_Lenient):
    messages: list[dict[str, Any]] = Field(min_length=1, max_length=100_000)
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)

    def wanted_tokens(self, default: int) -> int:
        return self.max_completion_tokens or self.max_tokens or default

    @property
    def parse_tools(self) -> bool:
        return bool(self.tools) and self.tool_choice != "none"


class CompletionRequest(_Lenient):
    prompt: str | list[int] = Field(description="Text, or token ids")
    max_tokens: int | None = Field(None, ge=1)
    logprobs: int | None = Field(None, ge=0, le=20)
    echo: bool = False


def _envelope(kind: str, model: str, choice: dict[str, Any], usage: dict[str, int]) -> dict[str, Any]:
    prefix = "chatcmpl" if kind.startswith("chat") else "cmpl"
    return {
        "id": f"{prefix}-{uuid.uuid4().hex}",
        "object": kind,
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": usage,
    }


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def chat_answer(
    request: ChatRequest,
    model: str,
    reply: Reply,
    pieces: list[str],
    logprobs: list[float],
    prompt_ids: list[int],
    completion_ids: list[int],
) -> dict[str, Any]:
    """A ``chat.completion`` object (``pieces``: each generated token's text, for ``logprobs``)."""
    choice: dict[str, Any] = {
        "index": 0,
        "message": reply.message(),
        "finish_reason": reply.finish_reason,
        "logprobs": None,
    }
    if request.logprobs:
        choice["logprobs"] = {
            "content": [
                {"token": piece, "logprob": lp, "bytes": list(piece.encode()), "top_logprobs": []}
                for piece, lp in zip(pieces, logprobs, strict=True)
            ]
        }
    body = _envelope("chat.completion", model, choice, usage(len(prompt_ids), len(completion_ids)))
    if request.return_token_ids:
        body["prompt_token_ids"] = prompt_ids
        choice["token_ids"] = completion_ids
    return body


def completion_answer(
    request: CompletionRequest,
    model: str,
    text: str,
    finish_reason: str,
    pieces: list[str],
    logprobs: list[float],
    prompt_ids: list[int],
    completion_ids: list[int],
) -> dict[str, Any]:
    """A ``text_completion`` object."""
    choice: dict[str, Any] = {"index": 0, "text": text, "finish_reason": finish_reason, "logprobs": None}
    if request.logprobs is not None:
        offsets, position = [], 0
        for piece in pieces:
            offsets.append(position)
            position += len(piece)
        choice["logprobs"] = {
            "tokens": pieces,
            "token_logprobs": logprobs,
            "top_logprobs": None,
            "text_offset": offsets,
        }
    if request.return_token_ids:
        choice["prompt_token_ids"] = prompt_ids
        choice["token_ids"] = completion_ids
    return _envelope("text_completion", model, choice, usage(len(prompt_ids), len(completion_ids)))


def sse(data: dict[str, Any] | str) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return f"data: {payload}\n\n".encode()


def chat_chunks(answer: dict[str, Any], include_usage: bool) -> Iterator[bytes]:
    """A finished ``chat.completion`` as the ``chat.completion.chunk`` events of a stream: the role,
    the content, each tool call whole, the finish reason, the usage if asked, ``[DONE]``."""
    choice = answer["choices"][0]
    message = choice["message"]
    base = {"id": answer["id"], "object": "chat.completion.chunk", "created": answer["created"],
            "model": answer["model"]}  # fmt: skip

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
        event = {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish, **extra}]}
        return sse(event)

    yield chunk({"role": "assistant", "content": ""})
    if message.get("content"):
        yield chunk({"content": message["content"]}, logprobs=choice.get("logprobs"))
    for index, call in enumerate(message.get("tool_calls") or []):
        yield chunk({"tool_calls": [{"index": index, **call}]})
    extra = {"token_ids": choice["token_ids"]} if "token_ids" in choice else {}
    yield chunk({}, choice["finish_reason"], **extra)
    if include_usage:
        yield sse({**base, "choices": [], "usage": answer["usage"]})
    yield sse("[DONE]")


def completion_chunks(answer: dict[str, Any], include_usage: bool) -> Iterator[bytes]:
    """A finished ``text_completion`` as stream events: the text, the finish reason, ``[DONE]``."""
    choice = answer["choices"][0]
    base = {"id": answer["id"], "object": "text_completion", "created": answer["created"],
            "model": answer["model"]}  # fmt: skip
    yield sse({**base, "choices": [{**choice, "finish_reason": None}]})
    yield sse({**base, "choices": [{"index": 0, "text": "", "finish_reason": choice["finish_reason"],
                                    "logprobs": None}]})  # fmt: skip
    if include_usage:
        yield sse({**base, "choices": [], "usage": answer["usage"]})
    yield sse("[DONE]")
