"""The episode finisher: export → grade → review → end, for every way an episode ends.

``finish`` (the agent or its runner), a timeout, a gateway shutdown, a lost engine and the recovery
of a dead gateway's episode all end an episode here, so the rules hold for all of them: the final
workspace is graded in a fresh container with the pristine tests, the guard reviews the final patch
where the grading mode produced one, the sandbox is destroyed, and the stored outcome is exactly
what is returned. Nothing the agent controls keeps its episode out of training: a workspace that
cannot be exported is graded 0.0 with the reason. What the infrastructure did is told apart: an
engine that stops answering (``EngineUnavailable``, only after a failed ping) ends the episode as
``infra_error``, never trained. Every ending is written only while this gateway holds the
episode's lease; a gateway that lost it returns what the new holder stored.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from gateway.core.dbrunner import DbRunner
from gateway.core.metrics import GatewayMetrics
from gateway.services.catalog import GradeHook, GradeOutcome
from gateway.services.live import LiveEpisode, LiveEpisodes
from guard.review_policy import PatchReviewPolicy, apply_patch_review
from sandbox.base import EngineUnavailable, SandboxBackend
from store.models import EpisodeStatus

log = logging.getLogger("gateway.finisher")

EXPORT_ATTEMPTS = 2

EndHook = Callable[[LiveEpisode], Awaitable[dict[str, Any]]]
"""Runs as an episode ends, before its outcome is stored; what it returns joins the details (the
model proxy writes the episode's recorded turns here, so they land before the episode is ended)."""


class EpisodeFinisher:
    """Ends live episodes: grades them, releases their sandboxes, stores the outcome."""

    def __init__(
        self,
        *,
        db: DbRunner,
        registry: LiveEpisodes,
        backend: SandboxBackend,
        grade: GradeHook,
        guard: Any,
        metrics: GatewayMetrics,
        patch_review: PatchReviewPolicy,
        holder: str,
    ) -> None:
        self.holder = holder
        #: Episodes being ended here (out of the registry while graded): their leases are still
        #: renewed, so a long grading is not taken for a dead gateway.
        self.ending: set[str] = set()
        self.db = db
        self.registry = registry
        self.backend = backend
        self.grade = grade
        self.guard = guard
        self.metrics = metrics
        self.patch_review = patch_review
        self.end_hooks: list[EndHook] = []

    async def grade_and_end(
        self, live: LiveEpisode, status: EpisodeStatus, extra: dict[str, str]
    ) -> GradeOutcome:
        """Grade the final workspace, destroy the sandbox, store status, reward and details."""
        reward: float | None
        live.closed, live.ended = True, True
        self.ending.add(live.id)
        try:
            workspace, problem = await self._export(live)
            # the sandbox goes before grading starts: the episode holds one container, never two
            # (engines are full when every running episode also holds a grading container)
            await self.release(live)
            if workspace is None:
                reward, details = 0.0, {"ungradable": problem}
            else:
                outcome = await self.grade(self.backend, live.task, workspace)
                reward, details = await self._review_patch(
                    live, outcome.reward, dict(outcome.details), getattr(outcome, "changes", None)
                )
        except EngineUnavailable as exc:  # the infrastructure, not the agent: never trained
            log.error("engine lost while ending", extra={"episode_id": live.id, "error": str(exc)})
            status, reward, details = EpisodeStatus.INFRA_ERROR, None, {"infra_error": str(exc)}
        except Exception as exc:  # a broken grader must not lose the episode: record why
            log.exception("grading failed", extra={"episode_id": live.id})
            status, reward, details = EpisodeStatus.FAILED, None, {"error": f"grading failed: {exc}"}
        finally:
            await self.release(live)
        details["status"] = status.value
        details.update(extra)
        details.update(await self._run_end_hooks(live))
        try:
            return await self._store_end(live.id, status, reward, details)
        finally:
            self.ending.discard(live.id)

    async def infra_error(self, live: LiveEpisode, reason: str) -> GradeOutcome | None:
        """End without grading because the infrastructure failed under the episode (its engine
        stopped answering): ``infra_error``, reward null, the reason kept. Once per episode."""
        if live.ended:
            return None
        live.closed, live.ended = True, True
        await self.release(live)
        details = {"status": EpisodeStatus.INFRA_ERROR.value, "infra_error": reason}
        return await self._store_end(live.id, EpisodeStatus.INFRA_ERROR, None, details)

    async def end_without_sandbox(
        self, episode_id: str, status: EpisodeStatus, details: dict
    ) -> GradeOutcome:
        """End an episode this gateway claimed but holds no sandbox for (it was lost with its owner)."""
        return await self._store_end(episode_id, status, None, {"status": status.value, **details})

    async def interrupt(self, live: LiveEpisode, why: str) -> None:
        """End without grading (the gateway is stopping): the episode becomes ``interrupted``."""
        live.closed, live.ended = True, True
        await self.release(live)
        details = {"interrupted": why, **(await self._run_end_hooks(live))}
        with contextlib.suppress(Exception):
            await self.db.run(
                self.db.store.end_episode,
                live.id,
                EpisodeStatus.INTERRUPTED,
                details=details,
                holder=self.holder,
            )

    async def _run_end_hooks(self, live: LiveEpisode) -> dict[str, Any]:
        """Each hook's details; a failing hook is logged and named, it does not keep the episode open."""
        details: dict[str, Any] = {}
        for hook in self.end_hooks:
            try:
                details.update(await hook(live))
            except Exception as exc:
                log.exception("an end-of-episode hook failed", extra={"episode_id": live.id})
                details.setdefault("end_hook_errors", []).append(f"{type(exc).__name__}: {exc}"[:500])
        return details

    async def _store_end(
        self, episode_id: str, status: EpisodeStatus, reward: float | None, details: dict
    ) -> GradeOutcome:
        """Write the ending while this gateway holds the lease; else return what is stored (the
        gateway that claimed the episode ended it): the answer is always what the store holds."""
        stored = await self.db.run(
            self.db.store.end_episode, episode_id, status, reward=reward, details=details, holder=self.holder
        )
        if not stored:
            row = await self.db.run(self.db.store.episode, episode_id)
            log.warning(
                "episode was ended elsewhere; its stored outcome stands",
                extra={"episode_id": episode_id, "status": row.status if row else None},
            )
            if row is not None and row.status != EpisodeStatus.RUNNING.value:
                return GradeOutcome(reward=row.reward, details=dict(row.details or {}))
            return GradeOutcome(
                reward=None, details={"status": "lost", "error": "this gateway lost the lease"}
            )
        self.metrics.episodes.labels(status.value).inc()
        log.info("episode ended", extra={"episode_id": episode_id, "status": status.value, "reward": reward})
        return GradeOutcome(reward=reward, details=details)

    async def release(self, live: LiveEpisode) -> None:
        """Forget the episode and destroy its sandbox (gc reaps it should the engine refuse)."""
        self.registry.remove(live)
        self.metrics.live_sandboxes.set(len(self.registry))
        try:
            await live.sandbox.destroy()
        except Exception:
            log.exception("sandbox destroy failed; gc will reap it", extra={"episode_id": live.id})

    async def _export(self, live: LiveEpisode) -> tuple[bytes | None, str]:
        """The final workspace, or None and why it could not be exported (tried twice: a runner the
        agent's last command left dead is restarted by the second try)."""
        problem = ""
        for _ in range(EXPORT_ATTEMPTS):
            try:
                return await live.sandbox.export_workspace(), ""
            except EngineUnavailable:
                raise  # the engine, not the agent
            except Exception as exc:  # SandboxError, a closed channel, a timeout: all the agent's doing
                problem = f"workspace export failed: {type(exc).__name__}: {exc}"[:1000]
                log.warning("workspace export failed", extra={"episode_id": live.id, "error": problem})
        return None, problem

    async def _review_patch(
        self, live: LiveEpisode, reward: float | None, details: dict[str, Any], changes: Any = None
    ) -> tuple[float | None, dict[str, Any]]:
        """The guard's review of the final workspace (the changed files the grader handed over, else
        the patch text), when the grading mode produced one."""
        reviewer = getattr(self.guard, "review_patch", None)
        patch = details.get("patch")
        if reviewer is None or not isinstance(patch, str) or reward is None:
            return reward, details
        material = changes if changes is not None else patch
        review = await asyncio.to_thread(reviewer, material, live.task.protected_paths, live.guard_state)
        return apply_patch_review(reward, details, review, self.patch_review)
