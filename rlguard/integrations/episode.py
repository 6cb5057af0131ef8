"""What the three adapters share: finding a gateway, one episode's life, and the answer text.

``gateway_target`` yields a URL and admin token: a running gateway's (``--gateway URL``), or a
gateway served in this process on a loopback port (the same app as ``rlguard serve``).
``Episode`` creates its gateway episode on first use, runs calls through it and finishes it
exactly once; while it lives it holds the gateway's presence stream, so an adapter whose process
dies (killed, crashed) leaves no running episode behind: the gateway finishes it.
``render_answer`` is the one way an adapter turns the gateway's ``{output, exit_code, truncated}``
into text, so a decoyed answer reads exactly like a real one through every adapter (the flags are
rendered the same way whatever produced them).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from rlguard.errors import RlguardError
from rlguard.settings import Settings
from rollout.gateway_client import EpisodeHandle, GatewayClient, GatewayError, ToolResult

log = logging.getLogger(__name__)

TRUNCATED_NOTE = "[output truncated]"


@dataclass(frozen=True)
class GatewayTarget:
    """Where an adapter sends its calls, and the admin token that creates episodes there."""

    url: str
    admin_token: str


def render_answer(output: str, exit_code: int, truncated: bool) -> str:
    """The text a harness shows its model: the output, then truncation and a non-zero exit code.

    The same layout as rlguard's own agent loop (``[exit code: N]`` on its own line), so a model
    sees one format whichever way it reaches the gateway.
    """
    text = output
    if truncated:
        text = f"{text}\n{TRUNCATED_NOTE}"
    if exit_code != 0:
        text = f"{text}\n[exit code: {exit_code}]"
    return text


def task_ref(suite: str, task: str) -> str:
    """``suite/task`` as the gateway names tasks; a suite given as a directory is named by its basename."""
    if "/" in task:
        raise RlguardError(f"--task {task!r}: give the task id alone (the suite is --suite)")
    name = Path(suite).name if ("/" in suite or Path(suite).is_dir()) else suite
    return f"{name}/{task}"


@contextlib.contextmanager
def gateway_target(
    url: str | None, settings: Settings, *, admin_token: str | None = None, suites: tuple[str, ...] = ()
) -> Iterator[GatewayTarget]:
    """A running gateway at ``url``, or (``url`` None) one served in this process until the block ends.

    The admin token is the given one, else the one the settings name (``RLGUARD_ADMIN_TOKEN`` or
    ``state_dir/admin_token``). ``suites`` are added to an in-process gateway's task suites.
    """
    from rlguard.loops.local_gateway import admin_token_from_settings, local_gateway

    if url is not None:
        token = admin_token or admin_token_from_settings(settings)
        if not token:
            raise RlguardError(
                "no admin token for the gateway: set RLGUARD_ADMIN_TOKEN (or run where its state_dir is)"
            )
        yield GatewayTarget(url.rstrip("/"), token)
        return
    settings = settings.model_copy(
        deep=True
    )  # the caller's (often the process-wide) settings stay as they are
    settings.gateway.suites += [s for s in suites if s not in settings.gateway.suites]
    if admin_token:
        settings.admin_token = SecretStr(admin_token)
    with local_gateway(settings) as gw:
        yield GatewayTarget(gw.url, gw.admin_token)


async def check_task(client: GatewayClient, ref: str) -> dict[str, Any]:
    """The gateway's view of task ``ref`` (id, instructions, ...); a clear error when it has none."""
    try:
        tasks = await client.tasks()
    except GatewayError as exc:
        raise RlguardError(f"the gateway at {client.base_url} cannot list its tasks: {exc}") from exc
    for task in tasks:
        if task["id"] == ref:
            return task
    known = ", ".join(sorted(t["id"] for t in tasks)[:20])
    raise RlguardError(f"the gateway has no task {ref!r} (it serves: {known})")


class EpisodeEnded(RlguardError):
    """A call arrived after the episode was finished (submitted or ended)."""


class Episode:
    """One gateway episode, created on first use and finished exactly once.

    Calls are serialised by the gateway per episode; the lock here only keeps creation and
    finishing single.
    """

    def __init__(self, client: GatewayClient, task: str, policy_version: str | None = None) -> None:
        self.client = client
        self.task = task
        self.policy_version = policy_version
        self.handle: EpisodeHandle | None = None
        self.result: tuple[float, dict[str, Any]] | None = None
        self.ended = False
        self._lock = asyncio.Lock()
        self._presence: asyncio.Task[None] | None = None

    @property
    def episode_id(self) -> str | None:
        return self.handle.episode_id if self.handle else None

    async def start(self) -> EpisodeHandle:
        async with self._lock:
            if self.ended:
                raise EpisodeEnded("this episode has ended; start a new session for a new episode")
            if self.handle is None:
                self.handle = await self.client.create_episode(self.task, self.policy_version)
                log.info("episode %s of %s started", self.handle.episode_id, self.task)
                # held open for the episode's life: if this process dies, the gateway finishes it
                self._presence = asyncio.get_running_loop().create_task(
                    self.client.hold_presence(self.handle)
                )
            return self.handle

    async def call(self, tool: str, arguments: dict[str, Any]) -> ToolResult:
        """One guarded call; ``submit`` also finishes (grades) the episode, as rlguard's runner does."""
        handle = await self.start()
        try:
            result = await self.client.call(handle, tool, arguments)
        except GatewayError as exc:
            if exc.status == 409:
                self.ended = True
                raise EpisodeEnded("this episode has ended; start a new session for a new episode") from exc
            raise
        if tool == "submit" and not result.rejected:
            await self.finish("submitted")
        return result

    async def finish(self, end_reason: str | None = None) -> tuple[float, dict[str, Any]] | None:
        """Grade and close the episode (idempotent); None when it never started or ended elsewhere."""
        try:
            return await self._finish(end_reason)
        finally:
            if self._presence is not None:
                self._presence.cancel()

    async def _finish(self, end_reason: str | None) -> tuple[float, dict[str, Any]] | None:
        async with self._lock:
            if self.ended or self.handle is None:
                self.ended = True
                return self.result
            self.ended = True
            try:
                self.result = await self.client.finish(self.handle, end_reason)
            except GatewayError as exc:
                if exc.status != 409:  # 409: already ended (timed out) — nothing left to grade
                    raise
                return None
            log.info("episode %s finished: reward %s", self.handle.episode_id, self.result[0])
            return self.result
