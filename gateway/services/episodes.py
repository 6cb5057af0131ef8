"""The episode service: the one object the routers call for an episode's life.

A thin facade over parts with one job each: the live-episode registry
(:mod:`gateway.services.live`: tokens, locks, expiry), the call handler
(:mod:`gateway.services.calls`: guard → run or decoy → record), the finisher
(:mod:`gateway.services.finisher`: export → grade → review → end), the lease keeper
(:mod:`gateway.services.leases`: this gateway's leases on its episodes) and the recovery
(:mod:`gateway.services.recovery`: ending what a dead gateway left running). Starting an episode
(task, sandbox from the warm pool, record with its lease, repository context) is done here.

Several gateways may share one database: each runs only the episodes it holds the lease of, and
never ends another's live episode (a call sent to the wrong gateway gets ``EpisodeElsewhere``).

Live episodes are held in memory so the hot path of a call touches the database once: the insert
of its record, committed before the answer leaves. Calls of one episode are serialised by its lock;
different episodes run concurrently.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Collection, Coroutine
from typing import Any, Protocol

from contract.calls import AnyCall, ToolAnswer
from contract.trajectory import SubTrajectoryUpload
from gateway.core.auth import hash_token, new_token
from gateway.core.dbrunner import DbRunner
from gateway.core.metrics import GatewayMetrics
from gateway.core.recorder import CallRecorder
from gateway.errors import CapacityError, EpisodeNotFound, EpisodeNotRunning
from gateway.services.calls import CallHandler, GuardLike
from gateway.services.catalog import GradeHook, GradeOutcome, TaskCatalog
from gateway.services.finisher import EpisodeFinisher
from gateway.services.leases import LeaseKeeper
from gateway.services.live import LiveEpisode, LiveEpisodes
from gateway.services.recovery import EpisodeRecovery
from gateway.settings import GatewaySettings
from guard.context import EpisodeState
from guard.repo import PROBE_SCRIPTS, RepoContext, parse_probe
from sandbox.base import EngineUnavailable, Sandbox, SandboxBackend, SandboxSpec
from store.codec import encode_action_mask, encode_logprobs, encode_token_ids
from store.models import EpisodeRow, EpisodeStatus, SubTrajectoryRow, utcnow

log = logging.getLogger("gateway.episodes")

REPO_PROBE_TIMEOUT_S = 10.0


class PoolLike(Protocol):
    """``sandbox.pool.WarmPool``'s interface, as the gateway uses it."""

    async def start(self) -> None: ...

    async def acquire(self, spec: SandboxSpec) -> Sandbox: ...

    async def close(self) -> None: ...


class EpisodeService:
    """Owns the live episodes of one gateway process; shares the database with other gateways."""

    def __init__(
        self,
        *,
        db: DbRunner,
        catalog: TaskCatalog,
        grade: GradeHook,
        backend: SandboxBackend,
        pool: PoolLike,
        guard: GuardLike,
        metrics: GatewayMetrics,
        settings: GatewaySettings,
        instance: str = "default",
    ) -> None:
        self.db = db
        self.catalog = catalog
        self.backend = backend
        self.pool = pool
        self.metrics = metrics
        self.settings = settings
        self.leases = LeaseKeeper(
            db, instance, settings.public_url, settings.lease_ttl_s, settings.lease_takeover_s
        )
        self.live = LiveEpisodes(db, self.leases.holder)
        self.calls = CallHandler(guard, CallRecorder(db), metrics)
        self.finisher = EpisodeFinisher(
            db=db,
            registry=self.live,
            backend=backend,
            grade=grade,
            guard=guard,
            metrics=metrics,
            patch_review=settings.patch_review,
            holder=self.leases.holder,
        )
        self.recovery = EpisodeRecovery(
            catalog=catalog, backend=backend, finisher=self.finisher, leases=self.leases
        )
        self._background: set[asyncio.Task] = set()
        self._sweeping = False

    # -- start, leases, recovery ------------------------------------------------------------------

    async def recover(self) -> None:
        """At start: end, in the background, the episodes whose lease lapsed that this gateway may
        take (its own instance's at once, others' only long lapsed), and reap orphaned sandboxes
        (gc spares those running episodes name). Live episodes of other gateways, on this database
        or this engine, are not touched."""
        self._spawn(self._sweep(), "rlguard-recovery-at-start")
        removed = await self.backend.gc()
        if removed:
            log.info("reaped orphaned sandboxes", extra={"count": removed})

    def _spawn(self, work: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.create_task(work, name=name)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def sandboxes_to_keep(self, sandbox_ids: Collection[str]) -> Collection[str]:
        """gc's retain hook: sandboxes a running episode (of any gateway) still names."""
        return await self.db.run(self.db.store.running_sandboxes, list(sandbox_ids))

    async def renew_leases(self) -> list[str]:
        """Renew this gateway's leases; drop the live episodes another gateway has claimed (this one
        was cut off from the database past the takeover time): they are that gateway's now."""
        held = {live.id for live in self.live if not live.ended} | self.finisher.ending
        held |= self.recovery.in_progress
        lost = await self.leases.renew(held)
        for episode_id in lost:
            live = self.live.get(episode_id)
            if live is None or live.ended:
                continue
            live.closed, live.ended = True, True
            live.closing_reason = "another gateway took over its lease"
            self.live.remove(live)
            self.metrics.live_sandboxes.set(len(self.live))
            log.error("lost the lease of a live episode", extra={"episode_id": episode_id})
        return sorted(lost)

    async def run_lease_loop(self) -> None:
        """Renew every ``ttl/3``; sweep for lapsed leases every other renewal (the sweep runs on its
        own task, so a long grading of recovered episodes never delays a renewal)."""
        rounds = 0
        while True:
            await asyncio.sleep(self.leases.renew_interval_s)
            try:
                await self.renew_leases()
            except Exception:
                log.exception("lease renewal failed")
            rounds += 1
            if rounds % 2 == 0 and not self._sweeping:
                self._spawn(self._sweep(), "rlguard-lease-sweep")

    async def _sweep(self) -> None:
        self._sweeping = True
        try:
            await self.recovery.sweep(live={live.id for live in self.live} | self.finisher.ending)
        except Exception:
            log.exception("lease sweep failed")
        finally:
            self._sweeping = False

    async def engine_down(self, engine: str, reason: str) -> None:
        """A fleet listener: the engine holding these episodes' sandboxes stopped answering; each
        ends as ``infra_error`` (after the call in flight, if any, which fails on its own)."""
        for live in self.live:
            if live.sandbox.engine != engine or live.ended:
                continue
            live.closed, live.closing_reason = True, f"engine {engine!r} stopped answering"
            self._spawn(
                self._end_infra(live, f"engine {engine!r} stopped answering: {reason}"), "rlguard-infra-end"
            )

    async def _end_infra(self, live: LiveEpisode, reason: str) -> None:
        async with live.lock:
            await self.finisher.infra_error(live, reason)

    async def create(self, task_ref: str, policy_version: str | None) -> tuple[LiveEpisode, str]:
        """Resolve the task, take a sandbox with its workspace, record the episode; return its token."""
        task = await asyncio.to_thread(self.catalog.resolve, task_ref)  # may build a workspace tar
        episode_id = uuid.uuid4().hex
        token = new_token()
        token_hash = hash_token(token)
        await self.db.run(
            self.db.store.upsert_task, task.id, task.suite, task.instructions, task.image, task.details
        )
        spec = SandboxSpec(
            image=task.image, limits=task.limits, episode_id=episode_id, workspace=task.workspace
        )
        try:
            sandbox = await self.pool.acquire(spec)
        except Exception as exc:  # engine down, image missing, out of memory: nothing was recorded
            log.exception("no sandbox for a new episode", extra={"episode_id": episode_id, "task": task.id})
            raise CapacityError(f"could not start a sandbox: {exc}") from exc
        try:
            now = utcnow()
            owner = self.leases.owner
            await self.db.run(
                self.db.store.create_episode,
                EpisodeRow(
                    id=episode_id,
                    task_id=task.id,
                    policy_version=policy_version,
                    status=EpisodeStatus.RUNNING.value,
                    agent_token_hash=token_hash,
                    sandbox_id=sandbox.id,
                    sandbox_engine=sandbox.engine or None,
                    num_calls=0,
                    created_at=now,
                    last_activity_at=now,
                    details={},
                    owner_instance=owner.instance,
                    owner_url=owner.url,
                    lease_holder=owner.holder,
                    lease_expires_at=self.leases.first_expiry(),
                ),
            )
        except BaseException:
            await sandbox.destroy()
            raise
        live = LiveEpisode(
            id=episode_id,
            task=task,
            token_hash=token_hash,
            sandbox=sandbox,
            policy_version=policy_version,
            guard_state=EpisodeState(repo=await _repo_context(sandbox, episode_id)),
        )
        self.live.add(live)
        self.metrics.live_sandboxes.set(len(self.live))
        self.metrics.episodes.labels("started").inc()
        log.info(
            "episode started", extra={"episode_id": episode_id, "task": task.id, "sandbox_id": sandbox.id}
        )
        return live, token

    # -- calls and endings ------------------------------------------------------------------------

    async def call(self, episode_id: str, request: AnyCall) -> ToolAnswer:
        """Guard, then run or decoy, then commit the record; only then is the answer returned."""
        live = await self.live.running(episode_id)
        async with live.lock:
            if live.closed:
                raise EpisodeNotRunning(episode_id, "ending", live.closing_reason)
            try:
                return await self.calls.handle(live, request)
            except EngineUnavailable as exc:  # the call did not complete: nothing is recorded for it
                await self.finisher.infra_error(live, str(exc))
                raise EpisodeNotRunning(episode_id, EpisodeStatus.INFRA_ERROR.value, str(exc)) from exc

    async def finish(
        self, episode_id: str, end_reason: str | None = None, details: dict[str, str] | None = None
    ) -> GradeOutcome:
        """Grade the final workspace in a fresh container, destroy the sandbox, record the reward.

        ``end_reason`` (from the runner) is kept in the details: the trainer reads it to tell how
        the episode ended. Only a grader that fails on its own (engine or image gone) leaves
        ``failed`` with no reward. The answer returned is exactly what is stored.
        """
        live = await self.live.running(episode_id)
        async with live.lock:
            if live.closed:
                raise EpisodeNotRunning(episode_id, "ending", live.closing_reason)
            live.closed = True
            extra = {**(details or {}), **({} if end_reason is None else {"end_reason": end_reason})}
            return await self.finisher.grade_and_end(live, EpisodeStatus.FINISHED, extra)

    async def expire(self) -> list[str]:
        """Time out episodes idle or alive too long (skipping any with a call in flight).

        A timed-out episode is graded like a finished one (its workspace as it stands), so running
        out the clock does not keep an episode out of training either.
        """
        expired = self.live.close_expired(
            self.settings.episode_idle_timeout_s, self.settings.episode_max_duration_s
        )

        async def end(live: LiveEpisode, reason: str) -> None:
            async with live.lock:
                if live.ended:
                    return
                await self.finisher.grade_and_end(live, EpisodeStatus.TIMED_OUT, {"timeout": reason})
            log.info("episode timed out", extra={"episode_id": live.id, "reason": reason})

        await asyncio.gather(*(end(live, reason) for live, reason in expired))
        return [live.id for live, _ in expired]

    async def run_expiry_loop(self) -> None:
        interval = max(
            0.2, min(30.0, self.settings.episode_idle_timeout_s / 4, self.settings.episode_max_duration_s / 4)
        )
        while True:
            await asyncio.sleep(interval)
            try:
                await self.expire()
            except Exception:
                log.exception("episode expiry sweep failed")

    async def shutdown(self) -> None:
        """Graceful stop: running episodes become ``interrupted`` and their sandboxes are destroyed."""
        for task in list(self._background):
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(task, 30)
        for live in self.live:
            if live.ended:
                continue
            with contextlib.suppress(Exception):
                await self.finisher.interrupt(live, "gateway shutdown")

    # -- trajectories and views -------------------------------------------------------------------

    async def add_sub_trajectory(self, episode_id: str, upload: SubTrajectoryUpload) -> SubTrajectoryRow:
        if await self.db.run(self.db.store.episode, episode_id) is None:
            raise EpisodeNotFound(episode_id)
        row = SubTrajectoryRow(
            episode_id=episode_id,
            index=upload.index,
            num_tokens=len(upload.token_ids),
            token_ids=encode_token_ids(upload.token_ids),
            action_mask=encode_action_mask(upload.action_mask),
            logprobs=encode_logprobs(upload.logprobs),
            policy_version=upload.policy_version,
            version_spans=[list(span) for span in upload.version_spans] if upload.version_spans else None,
            trainable=upload.trainable,
            created_at=utcnow(),
        )
        await self.db.run(self.db.store.add_sub_trajectory, row)
        return row

    async def episode(self, episode_id: str) -> EpisodeRow:
        row = await self.db.run(self.db.store.episode, episode_id, with_children=True)
        if row is None:
            raise EpisodeNotFound(episode_id)
        return row


async def _repo_context(sandbox: Sandbox, episode_id: str) -> RepoContext | None:
    """What the task repository holds beyond its base, asked once at episode start (a few bounded
    git commands). None when the sandbox cannot answer: git calls naming objects are then escalated
    instead of decided."""
    outputs: dict[str, tuple[str, int]] = {}
    try:
        for name, command in PROBE_SCRIPTS.items():
            result = await sandbox.exec(command, timeout_s=REPO_PROBE_TIMEOUT_S)
            outputs[name] = (result.output, 1 if result.truncated else result.exit_code)
            if name == "head" and result.exit_code != 0:
                break  # not a git repository: nothing lies beyond
    except Exception:
        log.warning("no repository context for the episode", extra={"episode_id": episode_id}, exc_info=True)
        return None
    return parse_probe(outputs)
