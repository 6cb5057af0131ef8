"""The live-episode registry: what one gateway holds in memory for each episode it runs.

A live episode carries what the hot path of a call needs without touching the database (its
sandbox, its lock, the next call number, the recent turns the judge sees, the guard's episode
memory and the running time of its real calls, which paces decoys). The registry indexes live
episodes by id and by agent-token hash, answers which token opens which episode, and picks the
episodes due to time out.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field

from contract.calls import ToolAnswer
from gateway.core.auth import hashes_equal
from gateway.core.dbrunner import DbRunner
from gateway.errors import EpisodeElsewhere, EpisodeNotFound, EpisodeNotRunning
from gateway.services.catalog import TaskInfo
from guard.context import EpisodeState
from sandbox.base import Sandbox
from store.models import EpisodeStatus

RECENT_TURNS = 8
RECENT_TURN_CHARS = 600
RECENT_ANSWER_CHARS = 240  # of each earlier answer, shown to the judge beside the call


def call_class(tool: str, answer: ToolAnswer) -> str:
    """Calls whose timing is alike: one tool, succeeding or failing (a missing file is quick)."""
    return f"{tool}:{'ok' if answer.exit_code == 0 else 'error'}"


@dataclass
class LiveEpisode:
    id: str
    task: TaskInfo
    token_hash: str
    sandbox: Sandbox
    policy_version: str | None
    started: float = field(default_factory=time.monotonic)
    last_activity: float = field(default_factory=time.monotonic)
    next_seq: int = 0
    closed: bool = False  # takes no more calls (ending)
    ended: bool = False  # its ending is written (or being written) by the finisher
    closing_reason: str | None = None  # why it closed, when not by finish or a timeout
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    recent: deque[str] = field(default_factory=lambda: deque(maxlen=RECENT_TURNS))
    guard_state: EpisodeState = field(default_factory=EpisodeState)
    # running time of this episode's real calls by class (tool, ok/error): decoys are paced by it
    exec_ms: dict[str, float] = field(default_factory=dict)

    def learn_exec_ms(self, tool: str, answer: ToolAnswer, exec_ms: float) -> None:
        """Fold a real call's running time into its class's moving average."""
        key = call_class(tool, answer)
        previous = self.exec_ms.get(key)
        self.exec_ms[key] = exec_ms if previous is None else 0.7 * previous + 0.3 * exec_ms

    def remember(self, tool: str, normalized: str, answer: ToolAnswer) -> None:
        """Keep the call and (the start of) its answer among the recent turns the judge sees."""
        shown = answer.output
        if len(shown) > RECENT_ANSWER_CHARS:
            shown = shown[:RECENT_ANSWER_CHARS] + "…"
        call_chars = RECENT_TURN_CHARS - RECENT_ANSWER_CHARS - 20
        self.recent.append(f"{tool}: {normalized[:call_chars]}\n=> exit {answer.exit_code}: {shown}")
        self.next_seq += 1
        self.last_activity = time.monotonic()


class LiveEpisodes:
    """The episodes this gateway runs, by id and by agent-token hash."""

    def __init__(self, db: DbRunner, holder: str) -> None:
        """``holder``: this gateway's lease holder token (episodes it holds run here)."""
        self.db = db
        self.holder = holder
        self._by_id: dict[str, LiveEpisode] = {}
        self._by_token: dict[str, str] = {}

    def __len__(self) -> int:
        return len(self._by_id)

    def __iter__(self) -> Iterator[LiveEpisode]:
        return iter(list(self._by_id.values()))

    def add(self, live: LiveEpisode) -> None:
        self._by_id[live.id] = live
        self._by_token[live.token_hash] = live.id

    def remove(self, live: LiveEpisode) -> None:
        self._by_id.pop(live.id, None)
        self._by_token.pop(live.token_hash, None)

    def get(self, episode_id: str) -> LiveEpisode | None:
        return self._by_id.get(episode_id)

    async def running(self, episode_id: str) -> LiveEpisode:
        """The live episode taking calls; else EpisodeNotFound, EpisodeNotRunning with its status,
        or EpisodeElsewhere when it runs on another gateway (its lease holder)."""
        live = self._by_id.get(episode_id)
        if live is not None and not live.closed:
            return live
        if live is not None and live.closing_reason:
            raise EpisodeNotRunning(episode_id, "ending", live.closing_reason)
        row = await self.db.run(self.db.store.episode, episode_id)
        if row is None:
            raise EpisodeNotFound(episode_id)
        if row.status != EpisodeStatus.RUNNING.value:
            reason = (row.details or {}).get("infra_error") if row.status == "infra_error" else None
            raise EpisodeNotRunning(episode_id, row.status, reason)
        if live is None and row.lease_holder is not None and row.lease_holder != self.holder:
            raise EpisodeElsewhere(episode_id, row.owner_instance, row.owner_url)
        raise EpisodeNotRunning(episode_id, "ending")

    async def token_opens_episode(self, episode_id: str, token_hash: str) -> bool | None:
        """True: this episode's token; False: another episode's token; None: no agent token at all."""
        live = self._by_id.get(episode_id)
        if live is not None and hashes_equal(live.token_hash, token_hash):
            return True
        if token_hash in self._by_token:
            return False
        owner = await self.db.run(self.db.store.episode_id_for_token_hash, token_hash)
        if owner is None:
            return None
        return owner == episode_id

    def close_expired(self, idle_timeout_s: float, max_duration_s: float) -> list[tuple[LiveEpisode, str]]:
        """Close (to new calls) and return the episodes idle or alive too long, with the reason;
        an episode with a call in flight is left for the next sweep."""
        now = time.monotonic()
        expired: list[tuple[LiveEpisode, str]] = []
        for live in self:
            idle = now - live.last_activity > idle_timeout_s
            overlong = now - live.started > max_duration_s
            if not (idle or overlong) or live.lock.locked() or live.closed:
                continue
            live.closed = True
            expired.append((live, "idle" if idle else "max_duration"))
        return expired
