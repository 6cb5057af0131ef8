"""Caps on what one client of ``rlguard mcp serve --transport http`` may hold open, and all together.

Every MCP session over HTTP is an episode, and every episode a sandbox the server creates with the
gateway's admin token on the client's behalf. Without caps any local process could open sessions
until the engine ran out of memory. Two resources are capped, per client (its remote address) and
for the whole server:

* **sessions**: a new session (a ``POST`` without ``Mcp-Session-Id``) over a cap gets HTTP 429 and
  a JSON-RPC error saying which cap and what to do; a session counts from its ``initialize`` until
  its ``DELETE`` or its idle expiry (the same timeout the SDK applies);
* **episodes** (sandboxes): a session's first tool call over a cap is an MCP error with the same
  kind of sentence; nothing is created at the gateway.

A slot is reserved before the SDK sees a new-session request, so concurrent ``initialize`` calls
cannot overshoot a cap.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field

from starlette.types import ASGIApp, Message, Receive, Scope, Send

SESSION_HEADER = b"mcp-session-id"


@dataclass(frozen=True)
class McpLimits:
    """How many sessions and episodes (sandboxes) one client, and all clients, may hold at once."""

    sessions_per_client: int = 16
    sessions: int = 64
    episodes_per_client: int = 8
    episodes: int = 32

    def __post_init__(self) -> None:
        for name in ("sessions_per_client", "sessions", "episodes_per_client", "episodes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")


class CapReached(Exception):
    """A new session or episode would go over a cap; the message says which and what to do."""


@dataclass
class Ledger:
    """Who holds what: sessions by id, episodes by session, each with its client."""

    limits: McpLimits
    idle_timeout_s: float
    _sessions: dict[str, tuple[str, float]] = field(default_factory=dict)  # id -> (client, last used)
    _pending: Counter[str] = field(default_factory=Counter)
    _episodes: dict[str, str] = field(default_factory=dict)  # session key -> client

    # -- sessions ---------------------------------------------------------------------------------

    def _expire(self) -> None:
        now = time.monotonic()
        for key in [k for k, (_, used) in self._sessions.items() if now - used > self.idle_timeout_s]:
            del self._sessions[key]

    def reserve_session(self, client: str) -> None:
        """Hold a slot for a session ``client`` is opening; CapReached when none is left."""
        self._expire()
        mine = sum(1 for owner, _ in self._sessions.values() if owner == client) + self._pending[client]
        total = len(self._sessions) + sum(self._pending.values())
        if mine >= self.limits.sessions_per_client:
            raise CapReached(
                f"too many MCP sessions from this client ({self.limits.sessions_per_client} open): "
                "end one (DELETE it) or raise --max-sessions-per-client"
            )
        if total >= self.limits.sessions:
            raise CapReached(
                f"this MCP server holds its maximum of {self.limits.sessions} sessions: "
                "try again when one ends, or raise --max-sessions"
            )
        self._pending[client] += 1

    def settle_session(self, client: str, session_id: str | None) -> None:
        """The reserved slot becomes ``session_id`` (or is freed when no session was made)."""
        self._pending[client] -= 1
        if self._pending[client] <= 0:
            del self._pending[client]
        if session_id:
            self._sessions[session_id] = (client, time.monotonic())

    def touch(self, session_id: str) -> None:
        entry = self._sessions.get(session_id)
        if entry is not None:
            self._sessions[session_id] = (entry[0], time.monotonic())

    def end_session(self, session_id: str) -> None:
        self._sessions.pop(session_id, None)

    # -- episodes (sandboxes) -----------------------------------------------------------------------

    def open_episode(self, key: str, client: str) -> None:
        """Count the episode of session ``key``; CapReached when ``client`` or the server is full."""
        if key in self._episodes:
            return
        mine = sum(1 for owner in self._episodes.values() if owner == client)
        if mine >= self.limits.episodes_per_client:
            raise CapReached(
                f"too many episodes (sandboxes) from this client ({self.limits.episodes_per_client} "
                "running): finish one (submit, or end its session) or raise --max-episodes-per-client"
            )
        if len(self._episodes) >= self.limits.episodes:
            raise CapReached(
                f"this MCP server runs its maximum of {self.limits.episodes} episodes (sandboxes): "
                "try again when one ends, or raise --max-episodes"
            )
        self._episodes[key] = client

    def close_episode(self, key: str) -> None:
        self._episodes.pop(key, None)


def client_of(scope: Scope) -> str:
    """The client's identity: its remote address (a unix-socket client has none: one shared key)."""
    client = scope.get("client")
    return str(client[0]) if client else "local"


class SessionCaps:
    """ASGI wrapper that counts sessions and refuses new ones over a cap with a 429."""

    def __init__(self, app: ASGIApp, ledger: Ledger) -> None:
        self.app = app
        self.ledger = ledger

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        session = next((v.decode("latin-1") for k, v in scope["headers"] if k == SESSION_HEADER), None)
        if session is not None:
            if scope["method"] == "DELETE":
                self.ledger.end_session(session)
            else:
                self.ledger.touch(session)
            await self.app(scope, receive, send)
            return
        if scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        client = client_of(scope)
        try:
            self.ledger.reserve_session(client)
        except CapReached as exc:
            await _refuse(send, str(exc))
            return
        made: str | None = None

        async def watch(message: Message) -> None:
            nonlocal made
            if message["type"] == "http.response.start" and 200 <= message["status"] < 300:
                headers = message.get("headers", [])
                made = next((v.decode("latin-1") for k, v in headers if k.lower() == SESSION_HEADER), None)
            await send(message)

        try:
            await self.app(scope, receive, watch)
        finally:
            self.ledger.settle_session(client, made)


async def _refuse(send: Send, message: str) -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": -32000, "message": message}}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 429,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})
