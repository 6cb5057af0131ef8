"""The guard: stage-1 rules, then (for escalations) the stage-2 judge, then a decoy when intercepted.

``Guard.check`` is called by the gateway for every tool call, so the common path (no rule fires)
is one synchronous rule pass and no awaits that block. Decisions, in order:

- no rule fires: **allow** (stage rules);
- a ``decoy`` rule fires: **decoy** (stage rules);
- a ``flag`` rule fires: **flag** (stage rules): the call runs and is marked;
- an ``escalate`` rule fires and a judge is configured: the judge decides. Cheat with at least
  ``min_confidence``: **decoy** (stage judge); cheat below it: **flag**; benign: **allow**. When the
  judge is down or answers garbage, the fail mode decides: ``closed`` decoys, ``open`` flags;
- an ``escalate`` rule fires and no judge is configured: the same fail mode decides, at stage rules
  (``closed``: decoy, ``open``: flag). A guard without a judge is thus strict by default; set
  ``RLGUARD_GUARD__JUDGE__FAIL_MODE=open`` to let unjudged escalations run and be marked instead.

Stage 1 and the decoy are synchronous CPU work (a pathological call may take its whole budget,
see ``guard.normalize.budget``), so ``check`` runs them in the guard's own worker threads, never
on the caller's event loop: one episode's heavy call cannot stall another episode's calls.

A decoyed bash call comes with ``GuardDecision.rewrite``: the agent's own line with only the
intercepted commands replaced by stubs (``guard.decoys.splice``), which the gateway runs in the
sandbox instead, so the rest of the line behaves as bash makes it behave. A call whose every
change lands on paths grading restores (the task's integrity surface, ``guard.integrity``) is
not decoyed at all: it runs, flagged. The optional ``probe`` (for file-tool decoys: ``cat --
PATH`` of an edited file) lets
the gateway read the sandbox for the decoy's sake; it is only awaited when such a decoy is built.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from guard.context import EpisodeState
from guard.decoys import MAYBE_ABSENT, culprit_of, make_decoy, probe_command
from guard.decoys.splice import SpliceError, whole_line
from guard.decoys.splice import rewrite as rewrite_line
from guard.integrity import surface_of
from guard.judge import Judge, JudgeEvent, JudgeStats
from guard.review import ChangedFile, PatchReview, review_patch
from guard.rules import RuleEngine
from guard.settings import GuardSettings
from guard.types import (
    Action,
    Category,
    GuardContext,
    GuardDecision,
    Integrity,
    RuleMatch,
    RuleResult,
    Stage,
    ToolAnswer,
    ToolCall,
    Verdict,
)

Probe = Callable[[str], Awaitable[ToolAnswer]]
log = logging.getLogger("rlguard.guard")

PROBE_TIMEOUT_S = 5.0
RESTORED_REASON = "changes only paths that grading restores: run and flagged"
STAGE1_WORKERS = 8  # threads for stage 1 and decoys; a call of one episode occupies at most one
_ENGINES_KEPT = 64  # distinct per-task surfaces whose engines (and their caches) stay cached
_CATEGORIES = frozenset(c.value for c in Category)


class Guard:
    """Stage 1 + stage 2 + decoys for one process; cheap to call, safe to share across episodes."""

    def __init__(
        self,
        settings: GuardSettings,
        engine: RuleEngine,
        judge: Judge | None = None,
        extra_protected_paths: Sequence[str] = (),
    ) -> None:
        self.settings = settings
        self.engine = engine
        self.judge = judge
        self._extra = tuple(extra_protected_paths)
        self._engines: OrderedDict[tuple[tuple[str, ...], Integrity], RuleEngine] = OrderedDict(
            {((), Integrity()): engine}
        )
        self._workers = ThreadPoolExecutor(STAGE1_WORKERS, thread_name_prefix="guard-stage1")

    @classmethod
    def from_settings(
        cls,
        settings: GuardSettings,
        extra_protected_paths: Sequence[str] = (),
        *,
        on_judge_event: Callable[[JudgeEvent], None] | None = None,
    ) -> Guard:
        """Rules from the built-in pack plus ``settings.rule_files``; a judge when a base URL is set."""
        engine = RuleEngine.from_settings(settings, extra_protected_paths)
        judge = Judge(settings.judge, on_event=on_judge_event) if settings.judge.base_url else None
        return cls(settings, engine, judge, extra_protected_paths)

    @property
    def judge_stats(self) -> JudgeStats | None:
        """The judge's counters (requests, cache hits, errors by kind, latency), or None without one."""
        return self.judge.stats if self.judge is not None else None

    @property
    def protected_paths(self) -> tuple[str, ...]:
        return (*self.settings.protected_paths, *self._extra)

    def engine_for(self, task_paths: Sequence[str], integrity: Integrity | None = None) -> RuleEngine:
        """The rule engine that also hides a task's own paths and applies its integrity surface
        (the compiled rules are shared; one engine, with its cache, per distinct task surface)."""
        key = (tuple(task_paths), integrity or Integrity())
        engine = self._engines.get(key)
        if engine is None:
            engine = self.engine.for_task((*self.protected_paths, *key[0]), key[1])
            self._engines[key] = engine
            while len(self._engines) > _ENGINES_KEPT:
                self._engines.popitem(last=False)
        self._engines.move_to_end(key)
        return engine

    def check_rules(
        self, call: ToolCall, context: GuardContext | None = None, state: EpisodeState | None = None
    ) -> RuleResult:
        """Stage 1 only, synchronous: for benchmarks, corpus evaluation and the first step of ``check``.
        With ``state``, the call is read with the episode's memory and the repository context."""
        engine = self._engine_for_context(context) if context is not None else self.engine
        if state is None:
            return engine.evaluate(call)
        return engine.evaluate(call, state.memory, state.repo)

    def _engine_for_context(self, context: GuardContext) -> RuleEngine:
        """The engine of a call's task: its own hidden paths and its integrity surface."""
        return self.engine_for(context.protected_paths, context.surface)

    async def check(
        self,
        call: ToolCall,
        context: GuardContext,
        probe: Probe | None = None,
        state: EpisodeState | None = None,
    ) -> GuardDecision:
        """The decision for one tool call: its verdict, its normalised text, and the decoy to show.
        With ``state``, the call is judged with what the episode left behind, and what it leaves
        behind (unless decoyed: then nothing happened) is remembered."""
        started = time.perf_counter()
        if not self.settings.enabled:
            verdict = Verdict(Action.ALLOW, Stage.RULES, reason="guard disabled")
            return GuardDecision(_timed(verdict, started, {}), normalized="")
        loop = asyncio.get_running_loop()
        result = await loop.run_in_executor(self._workers, self.check_rules, call, context, state)
        rules_us = (time.perf_counter() - started) * 1e6
        stage_latency = {"rules": rules_us}
        match = result.match
        if match is None:
            verdict = Verdict(Action.ALLOW, Stage.RULES)
        elif match.action == "escalate":
            verdict = await self._escalate(call, result, match, context, stage_latency)
        else:
            action = Action.DECOY if match.action == "decoy" else Action.FLAG
            verdict = _rule_verdict(action, Stage.RULES, match, match.description)
        decoy = rewrite = None
        ran: tuple[str, RuleResult] | None = None
        if verdict.action == Action.DECOY:
            decoy_started = time.perf_counter()
            if call.tool == "bash":
                decoy, rewrite, ran = await loop.run_in_executor(
                    self._workers, self._bash_decoy, call, result, context, state
                )
            elif not surface_of(context.surface).only_restored(result):
                decoy = await self._decoy(call, result, context, probe)
            stage_latency["decoy"] = (time.perf_counter() - decoy_started) * 1e6
            if decoy is None:  # it only changes tests that grading restores: let it happen, marked
                verdict = replace(verdict, action=Action.FLAG, reason=f"{verdict.reason} ({RESTORED_REASON})")
        if state is not None:
            if verdict.action != Action.DECOY:
                self._remember(call, result, state, context.episode_id)
            elif ran is not None:  # a stubbed line: what ran for real is the line with the stubs blanked
                self._remember(ToolCall("bash", {"command": ran[0]}), ran[1], state, context.episode_id)
        return GuardDecision(_timed(verdict, started, stage_latency), result.normalized.text, decoy, rewrite)

    def _bash_decoy(
        self, call: ToolCall, result: RuleResult, context: GuardContext, state: EpisodeState | None
    ) -> tuple[ToolAnswer | None, str | None, tuple[str, RuleResult] | None]:
        """The decoy of a bash call: the invented answer for the whole call (the fallback), the
        line to run in the sandbox with its intercepted commands stubbed (``guard.decoys.splice``)
        and what of it runs for real, read (None when nothing does); (None, None, None) when all
        it intercepts are changes to restored tests."""
        paths = (*self.protected_paths, *context.surface.hidden)
        engine = self._engine_for_context(context)

        def evaluate(sub: ToolCall) -> RuleResult:  # parts of the line, read with the episode's state
            return (
                engine.evaluate(sub, state.memory, state.repo) if state is not None else engine.evaluate(sub)
            )

        def decoy_for(sub: ToolCall, sub_result: RuleResult, probe: ToolAnswer | None) -> ToolAnswer:
            return make_decoy(sub, sub_result, context, probe=probe, protected_paths=paths)

        surface = surface_of(context.surface)

        def restored(sub_result: RuleResult) -> bool:
            return surface.only_restored(sub_result)

        whole = make_decoy(call, result, context, protected_paths=paths)
        script = str(call.arguments.get("command", ""))
        if result.normalized.parse_error is not None:
            return whole, whole_line(whole), None
        try:
            rewritten = rewrite_line(
                script, result, culprit_of(result, paths), evaluate, decoy_for, MAYBE_ABSENT, restored
            )
        except SpliceError:
            return whole, whole_line(whole), None
        if rewritten is None and restored(result):
            return None, None, None
        line, skeleton = rewritten if rewritten is not None else (None, "")
        left = evaluate(ToolCall("bash", {"command": skeleton})) if line is not None else None
        if line is None or left is None or _still_intercepted(left, restored):
            # what the rules object to is not in the stubbed commands alone (protected data
            # flowing through a redirect or a variable into commands that look harmless): nothing
            # of the line runs
            return whole, whole_line(whole), None
        return whole, line, (skeleton, left)

    @staticmethod
    def _remember(call: ToolCall, result: RuleResult, state: EpisodeState, episode_id: str) -> None:
        """Record what a call that runs leaves behind (a decoyed call changes nothing)."""
        try:
            state.memory.observe(call, result.normalized)
        except Exception:  # lost state costs a later call an escalation, never this call
            log.exception("episode memory could not record a call", extra={"episode_id": episode_id})
            state.memory.overflowed = True  # from now on, running a file it does not hold is escalated

    async def _escalate(
        self,
        call: ToolCall,
        result: RuleResult,
        match: RuleMatch,
        context: GuardContext,
        stage_latency: dict[str, float],
    ) -> Verdict:
        fail_mode = self.settings.judge.fail_mode
        fail_action = Action.DECOY if fail_mode == "closed" else Action.FLAG
        if self.judge is None:
            reason = f"{match.description} (escalated, no judge configured: failing {fail_mode})"
            return _rule_verdict(fail_action, Stage.RULES, match, reason)
        judged = await self.judge.review(result.normalized, match, context, call)
        stage_latency["judge"] = judged.latency_us
        category = judged.category if judged.category in _CATEGORIES else match.category
        if judged.error is not None:
            action = fail_action
        elif judged.verdict == "benign":
            action = Action.ALLOW
        elif judged.confidence >= self.settings.judge.min_confidence:
            action = Action.DECOY
        else:
            action = Action.FLAG
        return Verdict(
            action=action,
            stage=Stage.JUDGE,
            rule_id=match.rule_id,
            category=category,
            confidence=judged.confidence,
            reason=judged.reason,
        )

    async def _decoy(
        self, call: ToolCall, result: RuleResult, context: GuardContext, probe: Probe | None
    ) -> ToolAnswer:
        probed = None
        command = probe_command(call, result) if probe is not None else None
        if probe is not None and command is not None:
            try:
                probed = await asyncio.wait_for(probe(command), PROBE_TIMEOUT_S)
            except Exception:  # a failed probe only costs fidelity: the decoy falls back to invention
                probed = None
        paths = (*self.protected_paths, *context.surface.hidden)
        build = functools.partial(make_decoy, call, result, context, probe=probed, protected_paths=paths)
        return await asyncio.get_running_loop().run_in_executor(self._workers, build)

    def review_patch(
        self,
        patch: str | Sequence[ChangedFile],
        task_paths: Sequence[str] = (),
        state: EpisodeState | None = None,
    ) -> PatchReview:
        """Stage-1 review of a final workspace (``guard.review``): its changed files as the grader
        handed them over, or a unified diff when only the text is known; with a task's protected
        paths and, at an episode's finish, the episode's memory and repository context."""
        return review_patch(patch, self.engine_for(task_paths), state=state)

    async def aclose(self) -> None:
        """Release the judge's HTTP connections and the stage-1 threads."""
        if self.judge is not None:
            await self.judge.aclose()
        self._workers.shutdown(wait=False, cancel_futures=True)


def _still_intercepted(result: RuleResult, exempt: Callable[[RuleResult], bool]) -> bool:
    """Whether the rewritten line would itself be intercepted (then it is not safe to run)."""
    match = result.match
    return match is not None and match.action in ("decoy", "escalate") and not exempt(result)


def _rule_verdict(action: Action, stage: Stage, match: RuleMatch, reason: str) -> Verdict:
    return Verdict(
        action, stage, rule_id=match.rule_id, category=match.category, confidence=1.0, reason=reason
    )


def _timed(verdict: Verdict, started: float, stage_latency: dict[str, float]) -> Verdict:
    return replace(verdict, latency_us=(time.perf_counter() - started) * 1e6, stage_latency_us=stage_latency)
