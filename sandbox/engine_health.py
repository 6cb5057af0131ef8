"""Is a Docker engine still there? One shared ping tells a dead engine from a slow command.

A broken runner channel or a timed-out call can mean the agent's command misbehaved, or the engine
itself stopped answering; only the second makes the sandbox's episode end as the engine's fault
(``EngineUnavailable``). Many sandboxes of one dead engine ask at once, so a ping still in flight is
shared, and each ping uses a fresh connection, off the backend's busy pool.
"""

from __future__ import annotations

import asyncio
import time

from sandbox.base import EngineUnavailable, SandboxError
from sandbox.endpoint import EngineEndpoint

PING_TIMEOUT_S = 3.0
PING_SHARE_S = 0.25  # a ping begun this shortly before a failure was seen still judges it


class EngineHealth:
    """Pings one engine on demand; the answer to "was it the engine?" after a failure."""

    def __init__(self, name: str, docker_host: str, endpoint: EngineEndpoint, api_version: str) -> None:
        self.name = name
        self.docker_host = docker_host
        self._endpoint = endpoint
        self._api_version = api_version
        self._ping: asyncio.Task[bool] | None = None
        self._ping_at = 0.0

    async def answers(self, timeout_s: float = PING_TIMEOUT_S, since: float | None = None) -> bool:
        """True when the engine answers a ping within ``timeout_s`` (a fresh connection, off the
        busy pool, so a pool stuck on a hung engine cannot hide that it hangs). ``since``: a ping
        still in flight that started at or after this ``time.monotonic()`` is shared instead of
        starting another (many sandboxes of a dead engine ask at once); a finished one never is."""
        if self._ping is None or self._ping.done() or since is None or self._ping_at < since:
            self._ping_at = time.monotonic()
            self._ping = asyncio.get_running_loop().create_task(self._ping_once(timeout_s))
        return await asyncio.shield(self._ping)

    async def _ping_once(self, timeout_s: float) -> bool:
        try:
            await asyncio.wait_for(asyncio.to_thread(self._ping_blocking, timeout_s), timeout_s + 1)
        except Exception:
            return False
        return True

    def _ping_blocking(self, timeout_s: float) -> None:
        client = self._endpoint.api_client(timeout_s, version=self._api_version)
        try:
            client.ping()
        finally:
            client.close()

    async def unavailable(self) -> EngineUnavailable | None:
        """EngineUnavailable when the engine fails a ping now (after a broken channel or a timeout:
        was it the engine, or only what ran in the sandbox?), else None."""
        if await self.answers(since=time.monotonic() - PING_SHARE_S):
            return None
        return EngineUnavailable(self.name, f"no answer from {self.docker_host} within {PING_TIMEOUT_S:g} s")

    async def failure(self, exc: BaseException) -> SandboxError:
        """The error for a call the engine did not answer: EngineUnavailable if a ping fails too."""
        down = await self.unavailable()
        if down is not None:
            return down
        return SandboxError(f"the engine at {self.docker_host} dropped a request: {exc}")
