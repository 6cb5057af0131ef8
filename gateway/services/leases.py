"""This gateway's leases on its episodes: renewed while they run, claimed when another's lapsed.

Several gateways may share one database (``docs/scaling.md``). Each episode is owned by the
gateway process that created it: ``LeaseOwner`` is this process (its ``RLGUARD_INSTANCE``, a
random holder token, the URL calls for its episodes must reach). The keeper renews the leases of
every episode this process runs in one statement per ``ttl/3``; an episode whose renewal comes
back empty was claimed by another gateway (this one was cut off from the database past the
takeover time) and is dropped here. It also finds episodes whose lease lapsed (this instance's
own at once: a previous process under the same name died; any other instance's only after
``takeover_s`` more) and claims them, compare-and-set, so exactly one gateway ends each.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Collection
from dataclasses import replace
from datetime import datetime, timedelta

from gateway.core.dbrunner import DbRunner
from store.leases import LapsedEpisode, LeaseOwner
from store.models import utcnow

log = logging.getLogger("gateway.leases")


class LeaseKeeper:
    """Renews, finds lapsed and claims leases for one gateway process."""

    def __init__(self, db: DbRunner, instance: str, url: str | None, ttl_s: float, takeover_s: float) -> None:
        self.db = db
        self.owner = LeaseOwner(instance=instance, holder=secrets.token_hex(16), url=url or None)
        self.ttl_s = ttl_s
        self.takeover_s = takeover_s

    @property
    def holder(self) -> str:
        return self.owner.holder

    @property
    def renew_interval_s(self) -> float:
        """A third of the lease: two renewals may fail (a slow database) before it lapses."""
        return max(0.1, self.ttl_s / 3)

    def set_url(self, url: str) -> None:
        """Where this gateway answers, once it is known (a gateway served on a free port)."""
        self.owner = replace(self.owner, url=url)

    def first_expiry(self) -> datetime:
        """The lease of a new episode (this host's clock; the first renewal moves it to the
        database's)."""
        return utcnow() + timedelta(seconds=self.ttl_s)

    async def renew(self, episode_ids: Collection[str]) -> set[str]:
        """Renew the leases on ``episode_ids``; return those no longer held (claimed elsewhere)."""
        if not episode_ids:
            return set()
        held = await self.db.run(self.db.store.renew_leases, self.holder, list(episode_ids), self.ttl_s)
        return set(episode_ids) - held

    async def lapsed(self, limit: int = 100) -> list[LapsedEpisode]:
        """Running episodes this gateway may claim now (see the module docstring)."""
        return await self.db.run(self.db.store.lapsed_episodes, self.owner.instance, self.takeover_s, limit)

    async def claim(self, episode: LapsedEpisode) -> bool:
        """Take ``episode``'s lapsed lease; False when its holder renewed it or another gateway won."""
        return await self.db.run(
            self.db.store.claim_episode, episode, self.owner, self.ttl_s, self.takeover_s
        )
