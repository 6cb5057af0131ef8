"""Episode lifecycle: create (sandbox from the warm pool), guarded calls, finish (grade), time out.

Live episodes are held in memory (sandbox, lock, next call number, recent turns) so the hot path
of a call touches the database once: the insert of its record, committed before the answer
leaves. Calls of one episode are serialised by its lock; different episodes run concurrently.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shlex
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from guard.context import EpisodeState
from guard.repo import PROBE_SCRIPTS, RepoContext, parse_probe
from guard.types import Action, Category, GuardContext, GuardDecision, Stage, ToolAnswer, ToolCall, Verdict
from rlguard.gateway.auth import hash_token, hashes_equal, new_token
from rlguard.gateway.dbrunner import DbRunner
from rlguard.gateway.metrics import GatewayMetrics
from rlguard.gateway.recorder import CallRecorder
from rlguard.gateway.schemas import BashCall, CallRequest, SubTrajectoryUpload
from rlguard.gateway.services.tool_runner import run_tool
from rlguard.gateway.tasks import GradeHook, GradeOutcome, TaskCatalog, TaskInfo
from rlguard.patch_review import apply_patch_review
from rlguard.settings import GatewaySettings
from sandbox.base import Sandbox, SandboxBackend, SandboxError, SandboxSpec
from store.codec import encode_action_mask, encode_logprobs, encode_token_ids
from store.models import EpisodeRow, EpisodeStatus, SubTrajectoryRow, ToolCallRow, utcnow

log = logging.getLogger("rlguard.gateway.episodes")

RECENT_TURNS = 8
RECENT_TURN_CHARS = 600
RECENT_ANSWER_CHARS = 240  # of each earlier answer, shown to the judge beside the call
REPO_PROBE_TIMEOUT_S = 10.0


class EpisodeNotFound(Exception):
    pass


class EpisodeNotRunning(Exception):
    def __init__(self, episode_id: str, status: str) -> None:
        super().__init__(f"episode {episode_id} is {status}; it takes no more calls")
        self.status = status


class CapacityError(Exception):
    """No sandbox could be started (engine down or out of resources)."""


Probe = Callable[[str], Awaitable[ToolAnswer]]


class GuardLike(Protocol):
    async def check(
        self,
        call: ToolCall,
        context: GuardContext,
        probe: Probe | None = None,
        state: EpisodeState | None = None,
    ) -> GuardDecision: ...


class PoolLike(Protocol):
    """``sandbox.pool.WarmPool``'s interface, as the gateway uses it."""

    async def start(self) -> None: ...

    async def acquire(self, spec: SandboxSpec) -> Sandbox: ...

    async def close(self) -> None: ...


PROBE_OUTPUT_CAP = 16 * 1024


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
    closed: bool = False
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    recent: deque[str] = field(default_factory=lambda: deque(maxlen=RECENT_TURNS))
    guard_state: EpisodeState = field(default_factory=EpisodeState)
    # running time of this episode's real calls by class (tool, ok/error): decoys are paced by it
    exec_ms: dict[str, float] = field(default_factory=dict)


def _call_class(tool: str, answer: ToolAnswer) -> str:
    """Calls whose timing is alike: one tool, succeeding or failing (a missing file is quick)."""
    return f"{tool}:{'ok' if answer.exit_code == 0 else 'error'}"


def _learn_exec_ms(live: LiveEpisode, tool: str, answer: ToolAnswer, exec_ms: float) -> None:
    key = _call_class(tool, answer)
    previous = live.exec_ms.get(key)
    live.exec_ms[key] = exec_ms if previous is None else 0.7 * previous + 0.3 * exec_ms


class EpisodeService:
    """Owns the live episodes of one gateway process (one gateway per Docker host)."""

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
    ) -> None:
        self.db = db
        self.recorder = CallRecorder(db)
        self.catalog = catalog
        self.grade = grade
        self.backend = backend
        self.pool = pool
        self.guard = guard
        self.metrics = metrics
        self.settings = settings
        self.live: dict[str, LiveEpisode] = {}
        self._live_by_token: dict[str, str] = {}

    # -- access -----------------------------------------------------------------------------------

    async def token_opens_episode(self, episode_id: str, token_hash: str) -> bool | None:
        """True: this episode's token; False: another episode's token; None: no agent token at all."""
        live = self.live.get(episode_id)
        if live is not None and hashes_equal(live.token_hash, token_hash):
            return True
        if token_hash in self._live_by_token:
            return False
        owner = await self.db.run(self.db.store.episode_id_for_token_hash, token_hash)
        if owner is None:
            return None
        return owner == episode_id

    async def is_agent_token(self, token_hash: str) -> bool:
        if token_hash in self._live_by_token:
            return True
        return await self.db.run(self.db.store.episode_id_for_token_hash, token_hash) is not None

    # -- lifecycle --------------------------------------------------------------------------------

    async def recover(self) -> list[str]:
        """At start: episodes a killed gateway left ``running`` become ``interrupted``; reap sandboxes."""
        orphans = await self.db.run(self.db.store.interrupt_running)
        removed = await self.backend.gc()
        for episode_id, sandbox_id in orphans:
            log.warning(
                "episode interrupted by a gateway restart",
                extra={"episode_id": episode_id, "sandbox_id": sandbox_id},
            )
        if removed:
            log.info("reaped orphaned sandboxes", extra={"count": removed})
        return [episode_id for episode_id, _ in orphans]

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
            await self.db.run(
                self.db.store.create_episode,
                EpisodeRow(
                    id=episode_id,
                    task_id=task.id,
                    policy_version=policy_version,
                    status=EpisodeStatus.RUNNING.value,
                    agent_token_hash=token_hash,
                    sandbox_id=sandbox.id,
                    num_calls=0,
                    created_at=now,
                    last_activity_at=now,
                    details={},
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
            guard_state=EpisodeState(repo=await self._repo_context(sandbox, episode_id)),
        )
        self.live[episode_id] = live
        self._live_by_token[token_hash] = episode_id
        self.metrics.live_sandboxes.set(len(self.live))
        self.metrics.episodes.labels("started").inc()
        log.info(
            "episode started", extra={"episode_id": episode_id, "task": task.id, "sandbox_id": sandbox.id}
        )
        return live, token

    @staticmethod
    async def _repo_context(sandbox: Sandbox, episode_id: str) -> RepoContext | None:
        """What the task repository holds beyond its base, asked once at episode start (a few
        bounded git commands). None when the sandbox cannot answer: git calls naming objects are
        then escalated instead of decided."""
        outputs: dict[str, tuple[str, int]] = {}
        try:
            for name, command in PROBE_SCRIPTS.items():
                result = await sandbox.exec(command, timeout_s=REPO_PROBE_TIMEOUT_S)
                outputs[name] = (result.output, 1 if result.truncated else result.exit_code)
                if name == "head" and result.exit_code != 0:
                    break  # not a git repository: nothing lies beyond
        except Exception:
            log.warning(
                "no repository context for the episode", extra={"episode_id": episode_id}, exc_info=True
            )
            return None
        return parse_probe(outputs)

    async def _live_or_raise(self, episode_id: str) -> LiveEpisode:
        live = self.live.get(episode_id)
        if live is not None and not live.closed:
            return live
        row = await self.db.run(self.db.store.episode, episode_id)
        if row is None:
            raise EpisodeNotFound(episode_id)
        status = row.status if row.status != EpisodeStatus.RUNNING.value else "ending"
        raise EpisodeNotRunning(episode_id, status)

    async def call(self, episode_id: str, request: CallRequest) -> ToolAnswer:
        """Guard, then run or decoy, then commit the record; only then is the answer returned."""
        live = await self._live_or_raise(episode_id)
        async with live.lock:
            if live.closed:
                raise EpisodeNotRunning(episode_id, "ending")
            start = time.perf_counter()
            arguments = request.arguments.model_dump(exclude_none=True)
            call = ToolCall(request.tool, arguments)
            context = GuardContext(
                task_statement=live.task.instructions,
                episode_id=episode_id,
                recent_turns=tuple(live.recent),
                protected_paths=live.task.protected_paths,
                restored_paths=live.task.restored_paths,
            )
            decision = await self._check(call, context, live)
            guard_ms = (time.perf_counter() - start) * 1000
            verdict = decision.verdict
            if verdict.action == Action.DECOY and decision.rewrite is None:
                answer = decision.decoy or ToolAnswer("", 1, False)
                await self._pace_decoy(live, request, answer)
                exit_code, timed_out, exec_ms = answer.exit_code, False, 0.0
            else:
                # a decoyed bash call runs too: its line with the intercepted commands stubbed
                to_run = request
                if verdict.action == Action.DECOY and isinstance(request, BashCall):
                    to_run = request.model_copy(
                        update={
                            "arguments": request.arguments.model_copy(update={"command": decision.rewrite})
                        }
                    )
                outcome = await run_tool(live.sandbox, to_run, live.task.limits)
                answer, exit_code, timed_out, exec_ms = (
                    outcome.answer,
                    outcome.exit_code,
                    outcome.timed_out,
                    outcome.exec_ms,
                )
                if verdict.action != Action.DECOY:
                    _learn_exec_ms(live, request.tool, answer, exec_ms)
            total_ms = (time.perf_counter() - start) * 1000
            row = ToolCallRow(
                episode_id=episode_id,
                seq=live.next_seq,
                tool=request.tool,
                arguments=arguments,
                normalized=decision.normalized,
                action=verdict.action.value,
                stage=verdict.stage.value if verdict.stage else None,
                rule_id=verdict.rule_id,
                category=verdict.category,
                confidence=verdict.confidence,
                reason=verdict.reason,
                answer_output=answer.output,
                answer_exit_code=answer.exit_code,
                answer_truncated=answer.truncated,
                was_decoy=verdict.action == Action.DECOY,
                exit_code=exit_code,
                timed_out=timed_out,
                guard_ms=guard_ms,
                exec_ms=exec_ms,
                total_ms=total_ms,
                created_at=utcnow(),
            )
            await self.recorder.record(row)
            live.next_seq += 1
            live.last_activity = time.monotonic()
            shown = (
                answer.output
                if len(answer.output) <= RECENT_ANSWER_CHARS
                else answer.output[:RECENT_ANSWER_CHARS] + "…"
            )
            live.recent.append(
                f"{request.tool}: {decision.normalized[: RECENT_TURN_CHARS - RECENT_ANSWER_CHARS - 20]}\n"
                f"=> exit {answer.exit_code}: {shown}"
            )
        self._observe(request.tool, decision, total_ms)
        log.log(
            logging.DEBUG if row.action == Action.ALLOW.value else logging.INFO,
            "tool call",
            extra={
                "episode_id": episode_id,
                "seq": row.seq,
                "tool": request.tool,
                "action": row.action,
                "category": row.category,
                "total_ms": round(total_ms, 2),
            },
        )
        return answer

    async def _check(self, call: ToolCall, context: GuardContext, live: LiveEpisode) -> GuardDecision:
        """The guard's decision; should the guard itself fail, fail closed (nothing runs)."""
        try:
            return await self.guard.check(call, context, probe=self._probe(live), state=live.guard_state)
        except Exception as exc:
            log.exception("guard failed; the call is not run", extra={"episode_id": live.id})
            verdict = Verdict(
                Action.DECOY,
                Stage.RULES,
                rule_id="guard_error",
                category=Category.UNPARSEABLE.value,
                reason=f"guard raised {type(exc).__name__}: {exc}"[:500],
            )
            return GuardDecision(verdict, normalized="", decoy=ToolAnswer("", 1, False))

    @staticmethod
    def _probe(live: LiveEpisode) -> Probe:
        """Lets a file-tool decoy read a workspace file (``cat -- PATH``: the text an edit would
        change) through the file API: no process runs in the sandbox, so none can be seen there.
        Anything else is answered as a failed probe (the decoy then invents its answer)."""

        async def probe(command: str) -> ToolAnswer:
            words = shlex.split(command)
            if len(words) != 3 or words[:2] != ["cat", "--"]:
                return ToolAnswer("", 1, False)
            try:
                data = await live.sandbox.read_file(words[2], max_bytes=PROBE_OUTPUT_CAP + 1)
            except (SandboxError, FileNotFoundError):
                return ToolAnswer("", 1, False)
            text = data[:PROBE_OUTPUT_CAP].decode("utf-8", errors="replace")
            return ToolAnswer(text, 0, len(data) > PROBE_OUTPUT_CAP)

        return probe

    async def _pace_decoy(self, live: LiveEpisode, request: CallRequest, answer: ToolAnswer) -> None:
        """Take as long as the real call would in this episode, so timing does not point at the
        guard: the same file operation is done for real and its result dropped (a path outside
        /workspace is refused by the sandbox as a real one is), then topped up to what this
        episode's real calls of the same class (tool, success or failure) took."""
        began = time.perf_counter()
        path = getattr(request.arguments, "path", None)
        if path is not None:
            with contextlib.suppress(Exception):
                await live.sandbox.read_file(path, max_bytes=1)
        done_ms = (time.perf_counter() - began) * 1000
        typical = live.exec_ms.get(_call_class(request.tool, answer))
        if typical is not None and typical > done_ms:
            await asyncio.sleep(min(typical - done_ms, 2000.0) / 1000)

    def _observe(self, tool: str, decision: GuardDecision, total_ms: float) -> None:
        verdict = decision.verdict
        self.metrics.calls.labels(tool, verdict.action.value, verdict.category or "").inc()
        self.metrics.call_seconds.labels(tool).observe(total_ms / 1000)

    async def finish(self, episode_id: str, end_reason: str | None = None) -> GradeOutcome:
        """Grade the final workspace in a fresh container, destroy the sandbox, record the reward.

        ``end_reason`` (from the runner) is kept in the details: the trainer reads it to tell an
        episode cut off by a limit (bootstrapped from the critic) from one the agent ended.

        Nothing the agent controls keeps its episode out of training: a workspace that cannot be
        exported (unreadable files, over the transfer cap, a runner killed by a memory flood) is
        graded 0.0 with the reason in ``details["ungradable"]``, status ``finished``. Only a grader
        that fails on its own (engine or image gone) leaves ``failed`` with no reward. The answer
        returned is exactly what is stored.
        """
        live = await self._live_or_raise(episode_id)
        async with live.lock:
            if live.closed:
                raise EpisodeNotRunning(episode_id, "ending")
            live.closed = True
            extra = {} if end_reason is None else {"end_reason": end_reason}
            return await self._grade_and_end(live, EpisodeStatus.FINISHED, extra)

    async def _grade_and_end(
        self, live: LiveEpisode, status: EpisodeStatus, extra: dict[str, str]
    ) -> GradeOutcome:
        """Grade the final workspace, destroy the sandbox, store status, reward and details."""
        reward: float | None
        try:
            workspace, problem = await self._export(live)
            if workspace is None:
                reward, details = 0.0, {"ungradable": problem}
            else:
                outcome = await self.grade(self.backend, live.task, workspace)
                reward, details = await self._review_patch(live, outcome.reward, dict(outcome.details))
        except Exception as exc:  # a broken grader must not lose the episode: record why
            log.exception("grading failed", extra={"episode_id": live.id})
            status, reward, details = EpisodeStatus.FAILED, None, {"error": f"grading failed: {exc}"}
        finally:
            await self._release(live)
        details["status"] = status.value
        details.update(extra)
        await self.db.run(self.db.store.end_episode, live.id, status, reward=reward, details=details)
        self.metrics.episodes.labels(status.value).inc()
        log.info("episode ended", extra={"episode_id": live.id, "status": status.value, "reward": reward})
        return GradeOutcome(reward=reward, details=details)

    async def _export(self, live: LiveEpisode) -> tuple[bytes | None, str]:
        """The final workspace, or None and why it could not be exported (tried twice: a runner the
        agent's last command left dead is restarted by the second try)."""
        problem = ""
        for _ in range(2):
            try:
                return await live.sandbox.export_workspace(), ""
            except Exception as exc:  # SandboxError, a closed channel, a timeout: all the agent's doing
                problem = f"workspace export failed: {type(exc).__name__}: {exc}"[:1000]
                log.warning("workspace export failed", extra={"episode_id": live.id, "error": problem})
        return None, problem

    async def _review_patch(
        self, live: LiveEpisode, reward: float | None, details: dict[str, Any]
    ) -> tuple[float | None, dict[str, Any]]:
        """The guard's review of the final patch, when the grading mode produced one."""
        reviewer = getattr(self.guard, "review_patch", None)
        patch = details.get("patch")
        if reviewer is None or not isinstance(patch, str) or reward is None:
            return reward, details
        review = await asyncio.to_thread(reviewer, patch, live.task.protected_paths, live.guard_state)
        return apply_patch_review(reward, details, review, self.settings.patch_review)

    async def _release(self, live: LiveEpisode) -> None:
        self.live.pop(live.id, None)
        self._live_by_token.pop(live.token_hash, None)
        self.metrics.live_sandboxes.set(len(self.live))
        try:
            await live.sandbox.destroy()
        except Exception:
            log.exception("sandbox destroy failed; gc will reap it", extra={"episode_id": live.id})

    async def expire(self) -> list[str]:
        """Time out episodes idle or alive too long (skipping any with a call in flight).

        A timed-out episode is graded like a finished one (its workspace as it stands), so running
        out the clock does not keep an episode out of training either.
        """
        now = time.monotonic()
        ending: list[tuple[LiveEpisode, str]] = []
        for live in list(self.live.values()):
            idle = now - live.last_activity > self.settings.episode_idle_timeout_s
            overlong = now - live.started > self.settings.episode_max_duration_s
            if not (idle or overlong) or live.lock.locked() or live.closed:
                continue
            live.closed = True
            ending.append((live, "idle" if idle else "max_duration"))

        async def end(live: LiveEpisode, reason: str) -> None:
            async with live.lock:
                await self._grade_and_end(live, EpisodeStatus.TIMED_OUT, {"timeout": reason})
            log.info("episode timed out", extra={"episode_id": live.id, "reason": reason})

        await asyncio.gather(*(end(live, reason) for live, reason in ending))
        return [live.id for live, _ in ending]

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
        for live in list(self.live.values()):
            live.closed = True
            await self._release(live)
            with contextlib.suppress(Exception):
                await self.db.run(
                    self.db.store.end_episode,
                    live.id,
                    EpisodeStatus.INTERRUPTED,
                    details={"interrupted": "gateway shutdown"},
                )

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
