"""Recovery: ending the episodes a dead gateway left running, with their real state.

A gateway that dies (SIGKILL, its host lost) leaves its episodes ``running`` with a lease nobody
renews. Once the lease has lapsed (this instance's own at once, another instance's after the
takeover time), a gateway claims it (``gateway.services.leases``) and ends the episode here:

- its sandbox is still there: the gateway attaches to it and grades the final workspace like any
  ending (``interrupted``, with the reward; interrupted episodes are recorded, never trained,
  because the agent's runner lost its gateway mid-episode);
- its sandbox or its engine is gone: ``infra_error`` with the reason (never trained);
- its task is unknown to this gateway (it serves other suites): ``infra_error`` with the reason.

Nothing else touches a running episode of another gateway: a gateway starting up does not end
live episodes of others (the bug this replaces marked every running episode ``interrupted``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection

from gateway.errors import UnknownTaskError
from gateway.services.catalog import TaskCatalog
from gateway.services.finisher import EpisodeFinisher
from gateway.services.leases import LeaseKeeper
from gateway.services.live import LiveEpisode
from sandbox.base import EngineUnavailable, SandboxBackend, SandboxGone, SandboxSpec
from store.leases import LapsedEpisode
from store.models import EpisodeStatus

log = logging.getLogger("gateway.recovery")

#: Recovered episodes graded at once (each grading starts a container).
CONCURRENT_RECOVERIES = 4


class EpisodeRecovery:
    """Claims lapsed leases and ends their episodes (see the module docstring)."""

    def __init__(
        self,
        *,
        catalog: TaskCatalog,
        backend: SandboxBackend,
        finisher: EpisodeFinisher,
        leases: LeaseKeeper,
    ) -> None:
        self.catalog = catalog
        self.backend = backend
        self.finisher = finisher
        self.leases = leases
        #: Episodes being ended here: their leases are renewed with the live ones meanwhile.
        self.in_progress: set[str] = set()
        self._slots = asyncio.Semaphore(CONCURRENT_RECOVERIES)

    async def sweep(self, live: Collection[str]) -> list[str]:
        """Claim every lapsed lease this gateway may take (skipping ``live``: episodes it runs
        whose renewal merely lags) and end those episodes; return the ids ended."""
        claimed: list[LapsedEpisode] = []
        for episode in await self.leases.lapsed():
            if episode.id in live or episode.id in self.in_progress:
                continue
            if await self.leases.claim(episode):
                self.in_progress.add(episode.id)
                claimed.append(episode)
        await asyncio.gather(*(self._end_one(episode) for episode in claimed))
        # the dead gateways' other containers (warm, grading) on engines this gateway reaches: gc of
        # their instance, which removes only containers whose owner process is certainly gone
        dead = {e.owner_instance for e in claimed if e.owner_instance} - {self.leases.owner.instance}
        for instance in sorted(dead):
            try:
                await self.backend.gc(instance)
            except Exception:
                log.exception("gc of a dead gateway's instance failed", extra={"instance": instance})
        return [episode.id for episode in claimed]

    async def _end_one(self, episode: LapsedEpisode) -> None:
        async with self._slots:
            try:
                status = await self.end(episode)
                log.warning(
                    "ended an episode its gateway left running",
                    extra={"episode_id": episode.id, "owner": episode.owner_instance, "status": status},
                )
            except Exception:
                log.exception("could not end a lapsed episode", extra={"episode_id": episode.id})
            finally:
                self.in_progress.discard(episode.id)

    async def end(self, episode: LapsedEpisode) -> str:
        """End one claimed episode with its real state; return the status stored."""
        owner = episode.owner_instance or "?"
        why = f"gateway {owner} ({episode.owner_url or 'no URL'}) stopped renewing its lease"
        recovered = {"recovered_by": self.leases.owner.instance, "previous_owner": owner}
        try:
            task = await asyncio.to_thread(self.catalog.resolve, episode.task_id)
        except UnknownTaskError:
            reason = f"{why}; task {episode.task_id!r} is unknown to this gateway"
            await self.finisher.end_without_sandbox(
                episode.id, EpisodeStatus.INFRA_ERROR, {"infra_error": reason, **recovered}
            )
            return EpisodeStatus.INFRA_ERROR.value
        spec = SandboxSpec(image=task.image, limits=task.limits, episode_id=episode.id)
        try:
            if episode.sandbox_id is None:
                raise SandboxGone("the episode names no sandbox")
            sandbox = await self.backend.attach(episode.sandbox_id, spec, episode.sandbox_engine)
        except (SandboxGone, EngineUnavailable) as exc:
            reason = f"{why}; its sandbox is lost: {exc}"
            await self.finisher.end_without_sandbox(
                episode.id, EpisodeStatus.INFRA_ERROR, {"infra_error": reason, **recovered}
            )
            return EpisodeStatus.INFRA_ERROR.value
        live = LiveEpisode(
            id=episode.id, task=task, token_hash="", sandbox=sandbox, policy_version=None, closed=True
        )
        outcome = await self.finisher.grade_and_end(
            live, EpisodeStatus.INTERRUPTED, {"interrupted": why, **recovered}
        )
        return str(outcome.details.get("status", EpisodeStatus.INTERRUPTED.value))
