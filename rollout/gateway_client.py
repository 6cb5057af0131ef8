"""The runner's side of the gateway's v1 HTTP API (DESIGN.md "Gateway HTTP API").

Retries follow what is safe to repeat: creating an episode, finishing, reading and uploading retry
on any transport error; a tool call retries only when the request surely never reached the gateway
(connection refused or connect timeout) or was refused with 429/503, because repeating a call that
ran (``rm``, ``git commit``) would change the episode.

Several gateways may share one database; an episode's calls and finish must reach the gateway that
runs it. One that does not answers 421 naming the owner's URL: nothing ran there, so the request
is sent to the owner (once). A 409 carries the episode's status: ``infra_error`` means the
infrastructure failed under it (never trained; the runner may run the task again).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import httpx

from rollout.policy import RetryPolicy

MAX_ERROR_CHARS = 2000


class GatewayError(Exception):
    """The gateway refused or failed a request the episode cannot go on without. ``episode_status``:
    the episode's status when the gateway said it has ended (409), e.g. ``infra_error``."""

    def __init__(self, message: str, status: int | None = None, episode_status: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.episode_status = episode_status


@dataclass(frozen=True)
class EpisodeHandle:
    episode_id: str
    agent_token: str
    tools: list[dict[str, Any]]


@dataclass(frozen=True)
class ToolResult:
    """What a tool call returned: the gateway's answer, or a 4xx the model is shown as an error."""

    output: str
    exit_code: int
    truncated: bool
    rejected: bool = False  # the gateway answered 4xx (bad arguments, unknown tool, too large)
    seconds: float = 0.0


def _detail(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:MAX_ERROR_CHARS]
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        return body["message"][:MAX_ERROR_CHARS]
    detail = body.get("detail", body) if isinstance(body, dict) else body
    if isinstance(detail, list):  # FastAPI validation errors
        parts = []
        for err in detail:
            if isinstance(err, dict):
                loc = ".".join(str(p) for p in err.get("loc", [])[1:])
                parts.append(f"{loc}: {err.get('msg', '')}" if loc else str(err.get("msg", "")))
        detail = "; ".join(parts)
    return str(detail)[:MAX_ERROR_CHARS]


def _owner_url(response: httpx.Response) -> str | None:
    """The owner's base URL of a 421 answer (the episode runs on that gateway), else None."""
    if response.status_code != 421:
        return None
    try:
        url = response.json().get("owner_url")
    except (ValueError, AttributeError):
        return None
    return url.rstrip("/") if isinstance(url, str) and url.startswith(("http://", "https://")) else None


def _episode_status(response: httpx.Response) -> str | None:
    if response.status_code != 409:
        return None
    try:
        status = response.json().get("status")
    except (ValueError, AttributeError):
        return None
    return status if isinstance(status, str) else None


class GatewayClient:
    """One pooled HTTP client for many concurrent episodes."""

    def __init__(
        self,
        base_url: str,
        admin_token: str,
        timeout_s: float = 600.0,
        retry: RetryPolicy | None = None,
        max_connections: int = 256,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._admin = {"Authorization": f"Bearer {admin_token}"}
        self.retry = retry or RetryPolicy()
        limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
        self._client = httpx.AsyncClient(base_url=self.base_url, timeout=timeout_s, limits=limits)

    async def aclose(self) -> None:
        await self._client.aclose()

    async def __aenter__(self) -> GatewayClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _request(
        self, method: str, path: str, *, headers: dict[str, str], json: Any = None, idempotent: bool = True
    ) -> httpx.Response:
        last: Exception | None = None
        target = path
        for attempt in range(self.retry.attempts):
            try:
                response = await self._client.request(method, target, headers=headers, json=json)
                owner = _owner_url(response)
                if owner is not None and target == path:  # nothing ran here: send it to the owner, once
                    target = owner + path
                    response = await self._client.request(method, target, headers=headers, json=json)
            except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
                last = exc
            except httpx.TransportError as exc:
                if not idempotent:
                    raise GatewayError(
                        f"{method} {path}: {exc!r} (not retried: the call may have run)"
                    ) from exc
                last = exc
            else:
                if response.status_code in (429, 503) or (idempotent and response.status_code >= 500):
                    last = GatewayError(f"{method} {path}: {response.status_code} {_detail(response)}")
                else:
                    return response
            if attempt + 1 < self.retry.attempts:
                await asyncio.sleep(self.retry.delay(attempt))
        raise GatewayError(f"{method} {path} failed after {self.retry.attempts} attempts: {last}")

    @staticmethod
    def _ok(response: httpx.Response, what: str) -> Any:
        if response.status_code >= 400:
            raise GatewayError(
                f"{what}: {response.status_code} {_detail(response)}",
                response.status_code,
                _episode_status(response),
            )
        return response.json()

    async def tools(self) -> list[dict[str, Any]]:
        return self._ok(await self._request("GET", "/v1/tools", headers=self._admin), "list tools")

    async def tasks(self) -> list[dict[str, Any]]:
        """The tasks the gateway serves (``GET /v1/tasks``: id, suite, instructions, image, details)."""
        return self._ok(await self._request("GET", "/v1/tasks", headers=self._admin), "list tasks")

    async def create_episode(self, task: str, policy_version: str | None = None) -> EpisodeHandle:
        payload: dict[str, Any] = {"task": task}
        if policy_version is not None:
            payload["policy_version"] = policy_version
        body = self._ok(
            await self._request("POST", "/v1/episodes", headers=self._admin, json=payload),
            f"create an episode of {task}",
        )
        return EpisodeHandle(body["episode_id"], body["agent_token"], list(body.get("tools") or []))

    async def call(self, episode: EpisodeHandle, tool: str, arguments: dict[str, Any]) -> ToolResult:
        """One tool call; 4xx input errors come back as a rejected result for the model to read."""
        headers = {"Authorization": f"Bearer {episode.agent_token}"}
        loop = asyncio.get_running_loop()
        started = loop.time()
        response = await self._request(
            "POST",
            f"/v1/episodes/{episode.episode_id}/calls",
            headers=headers,
            json={"tool": tool, "arguments": arguments},
            idempotent=False,
        )
        seconds = loop.time() - started
        if response.status_code in (400, 413, 422):
            detail = _detail(response).replace("body.arguments.", "").replace("body: ", "")
            return ToolResult(f"Error: {detail}", 2, False, rejected=True, seconds=seconds)
        body = self._ok(response, f"tool call {tool}")
        return ToolResult(
            body["output"], int(body["exit_code"]), bool(body.get("truncated")), seconds=seconds
        )

    async def finish(
        self, episode: EpisodeHandle, end_reason: str | None = None
    ) -> tuple[float | None, dict[str, Any]]:
        """Grade the episode. ``end_reason`` (submitted, max_turns, ...) tells the trainer whether the
        episode was truncated (bootstrap the value) or ended (reward is final). The reward is None
        only when the gateway's grader failed (the episode is then ``failed``)."""
        headers = {"Authorization": f"Bearer {episode.agent_token}"}
        payload = {"end_reason": end_reason} if end_reason else None
        path = f"/v1/episodes/{episode.episode_id}/finish"
        body = self._ok(
            await self._request("POST", path, headers=headers, json=payload), "finish the episode"
        )
        reward = body.get("reward")
        return (None if reward is None else float(reward)), dict(body.get("details") or {})

    async def upload_subtrajectory(self, episode_id: str, record: dict[str, Any]) -> None:
        self._ok(
            await self._request(
                "POST", f"/v1/episodes/{episode_id}/subtrajectories", headers=self._admin, json=record
            ),
            f"upload sub-trajectory {record.get('index')}",
        )

    async def hold_presence(self, episode: EpisodeHandle) -> None:
        """Hold the episode's presence stream open until cancelled. While it is open the gateway
        knows the harness is there; when it closes with the episode still running (the process died),
        the gateway finishes the episode. Errors end the wait quietly: presence is a safety net."""
        headers = {"Authorization": f"Bearer {episode.agent_token}"}
        path = f"/v1/episodes/{episode.episode_id}/presence"
        try:
            timeout = httpx.Timeout(None, connect=10.0)
            async with self._client.stream("GET", path, headers=headers, timeout=timeout) as response:
                async for _ in response.aiter_bytes():
                    pass
        except httpx.HTTPError:
            return

    async def episode(self, episode_id: str) -> dict[str, Any]:
        return self._ok(
            await self._request("GET", f"/v1/episodes/{episode_id}", headers=self._admin), "episode"
        )
