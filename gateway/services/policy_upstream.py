"""The model proxy's client of the policy server: token ids in, token ids and logprobs out.

Every turn is a ``/v1/completions`` request with a token-id prompt, ``return_token_ids`` and
``logprobs`` — the dialect of vLLM (>= 0.10.2), of ``rlguard policy serve`` and of servers that spell
ids as ``token_id:N`` (``--return-tokens-as-token-ids``), read by the same parser rlguard's own
runner uses. Answers are read up to a byte cap and within a timeout, so a misbehaving server costs
the proxy bounded memory and time.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any

import httpx

from rollout.policy import PolicyError, parse_completion_choice

CONNECT_ATTEMPTS = 3
MAX_ERROR_CHARS = 1000


class UpstreamError(Exception):
    """The policy server failed a turn; ``status`` is what the harness gets (the server's own 4xx,
    502 for a failure, 504 for a timeout)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Generation:
    """One generated turn exactly as the engine produced it."""

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str
    version: str | None  # the weights that produced it, when the server says (rlguard policy serve)
    seconds: float


class PolicyUpstream:
    """One pooled HTTP client to ``base_url`` (``.../v1``)."""

    def __init__(self, base_url: str, api_key: str | None, timeout_s: float, max_response_bytes: int) -> None:
        self.base_url = base_url.rstrip("/")
        self.max_response_bytes = max_response_bytes
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        limits = httpx.Limits(max_connections=512, max_keepalive_connections=64)
        self._client = httpx.AsyncClient(
            headers=headers, timeout=httpx.Timeout(timeout_s, connect=10.0), limits=limits
        )

    async def aclose(self) -> None:
        await self._client.aclose()

    async def _request(self, method: str, path: str, payload: dict[str, Any] | None = None) -> Any:
        """The decoded JSON answer; a connection that could not be opened is retried (nothing ran)."""
        url = f"{self.base_url}{path}"
        for attempt in range(CONNECT_ATTEMPTS):
            try:
                async with self._client.stream(method, url, json=payload) as response:
                    body = await self._read_capped(response)
                    break
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                if attempt + 1 == CONNECT_ATTEMPTS:
                    message = f"the policy server at {self.base_url} is unreachable: {exc}"
                    raise UpstreamError(502, message) from exc
                await asyncio.sleep(0.2 * 2**attempt)
            except httpx.TimeoutException as exc:
                raise UpstreamError(504, f"the policy server did not answer in time ({exc!r})") from exc
            except httpx.TransportError as exc:
                raise UpstreamError(502, f"the policy server's connection failed: {exc!r}") from exc
        if response.status_code >= 400:
            message = _error_message(body)
            status = response.status_code if 400 <= response.status_code < 500 else 502
            raise UpstreamError(status, f"the policy server answered {response.status_code}: {message}")
        try:
            return json.loads(body)
        except ValueError as exc:
            raise UpstreamError(502, "the policy server's answer is not JSON") from exc

    async def _read_capped(self, response: httpx.Response) -> bytes:
        chunks, size = [], 0
        async for chunk in response.aiter_bytes():
            size += len(chunk)
            if size > self.max_response_bytes:
                raise UpstreamError(
                    502, f"the policy server's answer is larger than {self.max_response_bytes} bytes"
                )
            chunks.append(chunk)
        return b"".join(chunks)

    async def models(self) -> dict[str, Any]:
        body = await self._request("GET", "/models")
        if not isinstance(body, dict) or not isinstance(body.get("data"), list):
            raise UpstreamError(502, "the policy server's /models answer has no data list")
        return body

    async def generate(self, model: str, prompt_ids: list[int], sampling: dict[str, Any]) -> Generation:
        """Sample one turn from ``prompt_ids`` (``sampling``: max_tokens, temperature, stop, ...)."""
        payload = {
            **sampling,
            "model": model,
            "prompt": prompt_ids,
            "logprobs": 0,
            "return_token_ids": True,
            "skip_special_tokens": False,
            "stream": False,
            "n": 1,
        }
        started = time.perf_counter()
        body = await self._request("POST", "/completions", payload)
        seconds = time.perf_counter() - started
        try:
            choice = body["choices"][0]
            ids, logprobs = parse_completion_choice(choice)
        except (KeyError, IndexError, TypeError) as exc:
            raise UpstreamError(502, "the policy server's answer has no choices") from exc
        except PolicyError as exc:
            raise UpstreamError(502, str(exc)) from exc
        served = body.get("policy_version")
        return Generation(
            token_ids=ids,
            logprobs=logprobs,
            finish_reason=str(choice.get("finish_reason") or "stop"),
            version=None if served is None else str(served),
            seconds=seconds,
        )


def _error_message(body: bytes) -> str:
    try:
        data = json.loads(body)
    except ValueError:
        return body[:MAX_ERROR_CHARS].decode("utf-8", "replace")
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])[:MAX_ERROR_CHARS]
        if data.get("detail") or data.get("message"):
            return str(data.get("detail") or data.get("message"))[:MAX_ERROR_CHARS]
    return str(data)[:MAX_ERROR_CHARS]
