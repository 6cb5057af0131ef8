"""What the agent loop needs from a policy, and clients for OpenAI-compatible servers.

Two kinds of policy:

- ``TokenPolicy``: token ids in, token ids + logprobs out (vLLM, SGLang and ``rlguard policy serve``
  through ``/v1/completions``; the scripted policy). Its turns are trainable.
- ``ChatPolicy``: messages in, a message out (``/v1/chat/completions`` of any endpoint, e.g. a hosted
  model for evaluation). The server's tokenisation is unknown, so its turns are NOT trainable.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import httpx


@dataclass(frozen=True)
class Sampling:
    """Sampling parameters for one generation."""

    max_tokens: int = 512
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop_token_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class Generation:
    """One generated turn: exact token ids, their logprobs, the text, why it stopped."""

    token_ids: list[int]
    logprobs: list[float]
    text: str
    finish_reason: str  # "stop" | "length"
    model_seconds: float = 0.0
    policy_version: str | None = None  # the weights that produced it, when known


@dataclass(frozen=True)
class ChatTurn:
    """One assistant message from a chat-completions endpoint."""

    text: str
    tool_calls: list[dict[str, Any]]
    finish_reason: str
    model_seconds: float = 0.0


@runtime_checkable
class TokenPolicy(Protocol):
    policy_version: str
    trainable: bool

    async def generate(self, prompt_ids: list[int], sampling: Sampling) -> Generation: ...


@runtime_checkable
class ChatPolicy(Protocol):
    policy_version: str

    async def chat(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], sampling: Sampling
    ) -> ChatTurn: ...


class PolicyError(Exception):
    """The policy endpoint refused or failed a request after retries."""


@dataclass
class RetryPolicy:
    """Exponential backoff with jitter for transport errors and 5xx/429 answers."""

    attempts: int = 4
    base_s: float = 0.2
    max_s: float = 4.0
    _rng: random.Random = field(default_factory=random.Random, repr=False)

    def delay(self, attempt: int) -> float:
        return min(self.max_s, self.base_s * 2**attempt) * (0.5 + self._rng.random() / 2)


async def post_json_with_retry(
    client: httpx.AsyncClient, url: str, payload: dict[str, Any], retry: RetryPolicy
) -> dict[str, Any]:
    """POST that retries what a retry can fix (transport errors, 429, 5xx), not 4xx input errors.

    Generation requests are idempotent from the caller's view, so retrying after a read timeout is
    safe here (unlike tool calls, see ``gateway_client``).
    """
    last: Exception | None = None
    for attempt in range(retry.attempts):
        try:
            response = await client.post(url, json=payload)
        except httpx.TransportError as exc:
            last = exc
        else:
            if response.status_code < 400:
                return response.json()
            if response.status_code != 429 and response.status_code < 500:
                raise PolicyError(f"policy endpoint {url} answered {response.status_code}: {response.text}")
            last = PolicyError(f"policy endpoint {url} answered {response.status_code}: {response.text}")
        if attempt + 1 < retry.attempts:
            await asyncio.sleep(retry.delay(attempt))
    raise PolicyError(f"policy endpoint {url} failed after {retry.attempts} attempts: {last}")


def parse_completion_choice(choice: dict[str, Any]) -> tuple[list[int], list[float]]:
    """Token ids and logprobs from a completions choice, vLLM-style or via ``token_id:N`` strings.

    vLLM (>= 0.10.2, ``return_token_ids``) and ``rlguard policy serve`` put ids in ``choice.token_ids``;
    servers started with ``--return-tokens-as-token-ids`` spell them ``token_id:N`` in
    ``logprobs.tokens``. Anything else cannot be trained on, so it is an error.
    """
    logprobs = choice.get("logprobs") or {}
    token_logprobs = [float(x) if x is not None else 0.0 for x in logprobs.get("token_logprobs") or []]
    ids = choice.get("token_ids")
    if ids is None:
        tokens = logprobs.get("tokens") or []
        if tokens and all(isinstance(t, str) and t.startswith("token_id:") for t in tokens):
            ids = [int(t.split(":", 1)[1]) for t in tokens]
    if ids is None:
        raise PolicyError("the completions endpoint returned no token ids (vLLM: return_token_ids=true)")
    if len(token_logprobs) != len(ids):
        raise PolicyError(f"the endpoint returned {len(ids)} token ids but {len(token_logprobs)} logprobs")
    return list(ids), token_logprobs


class CompletionsPolicy:
    """A ``TokenPolicy`` over ``POST {base_url}/completions`` with token-id prompts.

    Which weights produced a generation: the version the server reports in its answer
    (``policy_version``, as ``rlguard policy serve`` does); otherwise ``version_source()`` (whoever
    pushes weights to a vLLM/SGLang server knows what it pushed) read before the request, or the fixed
    ``policy_version``. A swap during the request is then recorded as the older version (the
    conservative side: the trainer treats the span as staler, never fresher, than it is).
    ``policy_version`` follows the newest version seen, so episodes started later record it.
    """

    trainable = True

    def __init__(
        self,
        base_url: str,
        model: str = "default",
        policy_version: str = "0",
        api_key: str | None = None,
        timeout_s: float = 300.0,
        retry: RetryPolicy | None = None,
        client: httpx.AsyncClient | None = None,
        version_source: Callable[[], str] | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self._version = policy_version
        self.version_source = version_source
        self.retry = retry or RetryPolicy()
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = client or httpx.AsyncClient(timeout=timeout_s, headers=headers)

    @property
    def policy_version(self) -> str:
        return self.version_source() if self.version_source is not None else self._version

    async def generate(self, prompt_ids: list[int], sampling: Sampling) -> Generation:
        payload: dict[str, Any] = {
            "model": self.model,
            "prompt": prompt_ids,
            "max_tokens": sampling.max_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "logprobs": 0,
            "return_token_ids": True,
            "skip_special_tokens": False,
        }
        if sampling.seed is not None:
            payload["seed"] = sampling.seed
        if sampling.stop_token_ids:
            payload["stop_token_ids"] = list(sampling.stop_token_ids)
        loop = asyncio.get_running_loop()
        started = loop.time()
        requested_under = self.policy_version
        body = await post_json_with_retry(self._client, f"{self.base_url}/completions", payload, self.retry)
        seconds = loop.time() - started
        choice = body["choices"][0]
        ids, logprobs = parse_completion_choice(choice)
        finish = choice.get("finish_reason") or "stop"
        served = body.get("policy_version")
        version = str(served) if served is not None else requested_under
        if served is not None and self.version_source is None:
            self._version = version
        return Generation(ids, logprobs, choice.get("text", ""), finish, seconds, version)

    async def aclose(self) -> None:
        await self._client.aclose()


class ChatCompletionsPolicy:
    """A ``ChatPolicy`` over ``POST {base_url}/chat/completions`` (evaluation; not trainable)."""

    trainable = False

    def __init__(
        self,
        base_url: str,
        model: str = "default",
        policy_version: str = "0",
        api_key: str | None = None,
        timeout_s: float = 300.0,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.policy_version = policy_version
        self.retry = retry or RetryPolicy()
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.AsyncClient(timeout=timeout_s, headers=headers)

    async def chat(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], sampling: Sampling
    ) -> ChatTurn:
        payload: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "tools": tools,
            "max_tokens": sampling.max_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
        }
        if sampling.seed is not None:
            payload["seed"] = sampling.seed
        loop = asyncio.get_running_loop()
        started = loop.time()
        url = f"{self.base_url}/chat/completions"
        body = await post_json_with_retry(self._client, url, payload, self.retry)
        choice = body["choices"][0]
        message = choice.get("message") or {}
        return ChatTurn(
            text=message.get("content") or "",
            tool_calls=list(message.get("tool_calls") or []),
            finish_reason=choice.get("finish_reason") or "stop",
            model_seconds=loop.time() - started,
        )

    async def aclose(self) -> None:
        await self._client.aclose()
