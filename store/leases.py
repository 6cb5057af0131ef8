"""Episode leases: which gateway process owns a running episode, and who may end it when it dies.

Several gateways share one database; each running episode is owned by the gateway process that
created it. The owner writes its lease on the episode row (``owner_instance``, ``owner_url``, a
random per-process ``lease_holder``, ``lease_expires_at``) and renews the leases of every episode
it still runs in one statement every few seconds. A lease that lapses means its holder stopped:
its own instance (restarted under the same ``RLGUARD_INSTANCE``) may claim the episode at once, any
other gateway once it has been lapsed for a grace period (its holder may only be slow). A claim is
a compare-and-set on the row, so two gateways never both end one episode, and ``end_episode`` with
a ``holder`` ends a row only while that holder still holds it.

Times are the database's clock on PostgreSQL (``now()``), so gateways on hosts whose clocks
disagree still agree on who holds what; SQLite serves one host and uses its clock.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from sqlalchemy import Engine, and_, func, or_, select, update

from store.models import EpisodeRow, EpisodeStatus, utcnow

if TYPE_CHECKING:
    from sqlalchemy.orm import Session, sessionmaker

#: Ids per statement in ``IN (...)`` lists (SQLite allows 32,766 variables; keep statements small).
CHUNK = 500
RUNNING = EpisodeStatus.RUNNING.value


@dataclass(frozen=True)
class LeaseOwner:
    """A gateway process as an owner of episodes: its instance name, holder token and public URL."""

    instance: str
    holder: str
    url: str | None


@dataclass(frozen=True)
class LapsedEpisode:
    """A running episode whose lease lapsed: what a gateway needs to claim and end it."""

    id: str
    task_id: str
    sandbox_id: str | None
    sandbox_engine: str | None
    owner_instance: str | None
    owner_url: str | None
    lease_holder: str | None
    lease_expires_at: datetime | None


def _chunks(ids: Collection[str]) -> Iterator[list[str]]:
    items = list(ids)
    for start in range(0, len(items), CHUNK):
        yield items[start : start + CHUNK]


class LeaseQueries:
    """The lease queries, mixed into ``Store`` (which provides ``engine`` and ``sessions``)."""

    engine: Engine
    sessions: sessionmaker[Session]

    def database_now(self) -> datetime:
        """The database's clock (PostgreSQL), else this host's: the one clock leases are read by."""
        if self.engine.dialect.name != "postgresql":
            return utcnow()
        with self.engine.connect() as connection:
            value = connection.execute(select(func.now())).scalar_one()
        return value.astimezone(UTC)

    def renew_leases(self, holder: str, episode_ids: Collection[str], ttl_s: float) -> set[str]:
        """Extend ``holder``'s leases on ``episode_ids`` by ``ttl_s`` from now; return the ids it
        still holds (an id missing from the answer was claimed by another gateway or has ended)."""
        if not episode_ids:
            return set()
        until = self.database_now() + timedelta(seconds=ttl_s)
        held: set[str] = set()
        with self.engine.begin() as connection:
            table = EpisodeRow.__table__
            for chunk in _chunks(episode_ids):
                result = connection.execute(
                    update(table)
                    .where(table.c.id.in_(chunk), table.c.lease_holder == holder, table.c.status == RUNNING)
                    .values(lease_expires_at=until)
                    .returning(table.c.id)
                )
                held.update(result.scalars())
        return held

    def lapsed_episodes(
        self, instance: str, takeover_after_s: float, limit: int = 100
    ) -> list[LapsedEpisode]:
        """Running episodes whose lease lapsed: any of ``instance``'s own as soon as it lapsed, any
        other gateway's once it has been lapsed ``takeover_after_s`` (and rows without a lease,
        from before leases existed), oldest first."""
        now = self.database_now()
        long_ago = now - timedelta(seconds=takeover_after_s)
        expires = EpisodeRow.lease_expires_at
        stmt = (
            select(
                EpisodeRow.id,
                EpisodeRow.task_id,
                EpisodeRow.sandbox_id,
                EpisodeRow.sandbox_engine,
                EpisodeRow.owner_instance,
                EpisodeRow.owner_url,
                EpisodeRow.lease_holder,
                EpisodeRow.lease_expires_at,
            )
            .where(
                EpisodeRow.status == RUNNING,
                or_(
                    expires.is_(None),
                    expires < long_ago,
                    and_(expires < now, EpisodeRow.owner_instance == instance),
                ),
            )
            .order_by(EpisodeRow.created_at)
            .limit(limit)
        )
        with self.sessions() as session:
            return [LapsedEpisode(*row) for row in session.execute(stmt).all()]

    def claim_episode(
        self, episode: LapsedEpisode, owner: LeaseOwner, ttl_s: float, takeover_after_s: float
    ) -> bool:
        """Take the lapsed lease of ``episode`` for ``owner`` (compare-and-set: False when its holder
        renewed it or another gateway claimed it first)."""
        now = self.database_now()
        cutoff = (
            now if episode.owner_instance == owner.instance else now - timedelta(seconds=takeover_after_s)
        )
        expires = EpisodeRow.lease_expires_at
        with self.sessions.begin() as session:
            result = session.execute(
                update(EpisodeRow)
                .where(
                    EpisodeRow.id == episode.id,
                    EpisodeRow.status == RUNNING,
                    EpisodeRow.lease_holder.is_not_distinct_from(episode.lease_holder),
                    or_(expires.is_(None), expires < cutoff),
                )
                .values(
                    lease_holder=owner.holder,
                    lease_expires_at=now + timedelta(seconds=ttl_s),
                    owner_instance=owner.instance,
                    owner_url=owner.url,
                )
                .execution_options(synchronize_session=False)
            )
            return result.rowcount == 1

    def running_sandboxes(self, sandbox_ids: Collection[str]) -> set[str]:
        """Those of ``sandbox_ids`` that a running episode still names (gc must spare them: the
        episode's lease may be claimed and its sandbox graded)."""
        found: set[str] = set()
        with self.sessions() as session:
            for chunk in _chunks(sandbox_ids):
                found.update(
                    session.scalars(
                        select(EpisodeRow.sandbox_id).where(
                            EpisodeRow.status == RUNNING, EpisodeRow.sandbox_id.in_(chunk)
                        )
                    )
                )
        return found
