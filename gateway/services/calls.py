"""The call handler: one tool call of a live episode, guard → run or decoy → record.

The order is the contract (DESIGN.md): the guard decides first; an allowed call runs in the
episode's sandbox, an intercepted one is answered with a decoy (a decoyed bash line still runs with
only its intercepted commands stubbed, so the rest behaves as bash makes it behave); the record of
the call is committed before the answer leaves. Should the guard itself fail, nothing runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shlex
import time
from typing import Protocol

from contract.calls import AnyCall, BashCall, ToolAnswer, ToolCall
from gateway.core.metrics import GatewayMetrics
from gateway.core.recorder import CallRecorder
from gateway.services.live import LiveEpisode, call_class
from gateway.services.tool_runner import run_tool
from guard.context import EpisodeState
from guard.pipeline import Probe
from guard.types import Action, Category, GuardContext, GuardDecision, Stage, Verdict
from sandbox.base import SandboxError
from store.models import ToolCallRow, utcnow

log = logging.getLogger("gateway.calls")

PROBE_OUTPUT_CAP = 16 * 1024
MAX_DECOY_PACING_MS = 2000.0


class GuardLike(Protocol):
    async def check(
        self,
        call: ToolCall,
        context: GuardContext,
        probe: Probe | None = None,
        state: EpisodeState | None = None,
    ) -> GuardDecision: ...


class CallHandler:
    """Answers the calls of live episodes; the caller holds the episode's lock."""

    def __init__(self, guard: GuardLike, recorder: CallRecorder, metrics: GatewayMetrics) -> None:
        self.guard = guard
        self.recorder = recorder
        self.metrics = metrics

    async def handle(self, live: LiveEpisode, request: AnyCall) -> ToolAnswer:
        """Guard, then run or decoy, then commit the record; only then is the answer returned."""
        start = time.perf_counter()
        call = request.to_call()
        decision = await self._check(call, self._context(live), live)
        guard_ms = (time.perf_counter() - start) * 1000
        verdict = decision.verdict
        timed_out, exec_ms = False, 0.0
        if verdict.action == Action.DECOY and decision.rewrite is None:
            answer = decision.decoy or ToolAnswer("", 1, False)
            await self._pace_decoy(live, request, answer)
        else:
            outcome = await run_tool(live.sandbox, _with_rewrite(request, decision), live.task.limits)
            answer, timed_out, exec_ms = outcome.answer, outcome.timed_out, outcome.exec_ms
            if verdict.action != Action.DECOY:
                live.learn_exec_ms(request.tool, answer, exec_ms)
        total_ms = (time.perf_counter() - start) * 1000
        row = _call_row(live, call, decision, answer, timed_out, (guard_ms, exec_ms, total_ms))
        await self.recorder.record(row)
        live.remember(request.tool, decision.normalized, answer)
        self._observe(request.tool, decision, total_ms)
        log.log(
            logging.DEBUG if row.action == Action.ALLOW.value else logging.INFO,
            "tool call",
            extra={
                "episode_id": live.id,
                "seq": row.seq,
                "tool": request.tool,
                "action": row.action,
                "category": row.category,
                "total_ms": round(total_ms, 2),
            },
        )
        return answer

    @staticmethod
    def _context(live: LiveEpisode) -> GuardContext:
        return GuardContext(
            task_statement=live.task.instructions,
            episode_id=live.id,
            recent_turns=tuple(live.recent),
            protected_paths=live.task.protected_paths,
            restored_paths=live.task.restored_paths,
            integrity=live.task.integrity,
        )

    async def _check(self, call: ToolCall, context: GuardContext, live: LiveEpisode) -> GuardDecision:
        """The guard's decision; should the guard itself fail, fail closed (nothing runs)."""
        try:
            return await self.guard.check(call, context, probe=_file_probe(live), state=live.guard_state)
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
    async def _pace_decoy(live: LiveEpisode, request: AnyCall, answer: ToolAnswer) -> None:
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
        typical = live.exec_ms.get(call_class(request.tool, answer))
        if typical is not None and typical > done_ms:
            await asyncio.sleep(min(typical - done_ms, MAX_DECOY_PACING_MS) / 1000)

    def _observe(self, tool: str, decision: GuardDecision, total_ms: float) -> None:
        verdict = decision.verdict
        self.metrics.calls.labels(tool, verdict.action.value, verdict.category or "").inc()
        self.metrics.call_seconds.labels(tool).observe(total_ms / 1000)


def _with_rewrite(request: AnyCall, decision: GuardDecision) -> AnyCall:
    """A decoyed bash call runs too: its line with the intercepted commands stubbed."""
    if decision.verdict.action != Action.DECOY or not isinstance(request, BashCall):
        return request
    arguments = request.arguments.model_copy(update={"command": decision.rewrite})
    return request.model_copy(update={"arguments": arguments})


def _file_probe(live: LiveEpisode) -> Probe:
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


def _call_row(
    live: LiveEpisode,
    call: ToolCall,
    decision: GuardDecision,
    answer: ToolAnswer,
    timed_out: bool,
    timings_ms: tuple[float, float, float],
) -> ToolCallRow:
    """The stored record of a call: what the agent sent, the verdict, what it was shown."""
    verdict = decision.verdict
    guard_ms, exec_ms, total_ms = timings_ms
    return ToolCallRow(
        episode_id=live.id,
        seq=live.next_seq,
        tool=call.tool,
        arguments=call.arguments,
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
        exit_code=answer.exit_code,
        timed_out=timed_out,
        guard_ms=guard_ms,
        exec_ms=exec_ms,
        total_ms=total_ms,
        created_at=utcnow(),
    )
