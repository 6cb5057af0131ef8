"""A harness's presence: an episode whose harness is gone is finished, not left for the idle sweep.

An adapter holds ``GET /v1/episodes/{id}/presence`` open for its episode's life (a stream of
comment heartbeats). When that connection closes while the episode still runs — the harness exited
without finishing it, crashed, or was killed — the episode is finished and graded after a short
grace (time for a ``finish`` the harness sent just before closing to land), with
``details["abandoned"]`` saying why. A harness that finishes its episode first is not affected.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from gateway.errors import EpisodeNotFound, EpisodeNotRunning
from gateway.services.episodes import EpisodeService

log = logging.getLogger("gateway.presence")

HEARTBEAT_S = 15.0
GRACE_S = 2.0
ABANDONED = "the harness's connection closed before it finished the episode"


class PresenceWatch:
    """Finishes the episodes whose harness connection closed; keeps its tasks until they end."""

    def __init__(self, episodes: EpisodeService, grace_s: float = GRACE_S) -> None:
        self.episodes = episodes
        self.grace_s = grace_s
        self._tasks: set[asyncio.Task[None]] = set()

    async def heartbeats(self, episode_id: str) -> AsyncIterator[bytes]:
        """The presence stream; its end (the client left, or the server stops) starts the check."""
        try:
            yield b": rlguard presence\n\n"
            while True:
                await asyncio.sleep(HEARTBEAT_S)
                yield b": alive\n\n"
        finally:
            task = asyncio.get_running_loop().create_task(self._finish_if_running(episode_id))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _finish_if_running(self, episode_id: str) -> None:
        await asyncio.sleep(self.grace_s)
        try:
            await self.episodes.live.running(episode_id)
        except (EpisodeNotFound, EpisodeNotRunning):
            return  # finished by its harness (or ending already): nothing was abandoned
        except Exception:  # the gateway is stopping (its database closed): shutdown ends it
            return
        log.warning("harness gone; finishing its episode", extra={"episode_id": episode_id})
        try:
            await self.episodes.finish(episode_id, details={"abandoned": ABANDONED})
        except (EpisodeNotFound, EpisodeNotRunning):
            pass
        except Exception:
            log.exception("could not finish an abandoned episode", extra={"episode_id": episode_id})

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
