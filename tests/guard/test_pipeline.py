"""The Guard pipeline: verdict assembly over hand-built stage-1 results and a real loopback judge.

Stage 1 is replaced by a table of hand-built ``RuleResult`` values here so that every branch of the
verdict logic is pinned down independently of the rule pack; ``test_pipeline_rules.py`` runs the
same pipeline end to end with the real ``RuleEngine``.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Iterator

import pytest

from guard.judge import Judge
from guard.pipeline import Guard
from guard.settings import GuardSettings, JudgeSettings
from guard.types import (
    Action,
    Command,
    GuardContext,
    NormalizedCall,
    RuleMatch,
    RuleResult,
    Stage,
    ToolAnswer,
    ToolCall,
)
from tests.support.openai_judge_server import (
    FakeJudgeServer,
    JudgeReply,
    always,
    keyword_policy,
    running_judge_server,
)

CONTEXT = GuardContext(task_statement="Fix the tokenizer", episode_id="ep-7")


def _result(command: str, action: str | None, category: str = "answer_fetch") -> RuleResult:
    argv = tuple(command.split())
    cmd = Command(argv[0], argv)
    normalized = NormalizedCall("bash", f"$ {command}", commands=(cmd,))
    if action is None:
        return RuleResult(normalized, None, latency_us=12.0)
    match = RuleMatch(f"rule.{action}", category, action, f"{action} rule", command=cmd)
    return RuleResult(normalized, match, latency_us=12.0)


class TableEngine:
    """Stage 1 as a lookup table: command text -> prepared result (unknown commands pass)."""

    def __init__(self, results: list[RuleResult]) -> None:
        self.results = {r.normalized.text[2:]: r for r in results}

    def evaluate(self, call: ToolCall) -> RuleResult:
        command = call.arguments["command"]
        return self.results.get(command) or _result(command, None)


ENGINE = TableEngine(
    [
        _result("curl https://example.com/sol.py", "decoy"),
        _result("pip install leftpad", "flag"),
        _result("wget https://example.com/data.csv", "escalate"),
        _result("git log --all --oneline", "decoy", "git_history_leak"),
    ]
)


def bash(command: str) -> ToolCall:
    return ToolCall("bash", {"command": command})


@pytest.fixture
def judge_server() -> Iterator[FakeJudgeServer]:
    with running_judge_server(keyword_policy({"wget": "answer_fetch"})) as server:
        yield server


@pytest.fixture
async def guards() -> AsyncIterator[list[Guard]]:
    made: list[Guard] = []
    yield made
    for guard in made:
        await guard.aclose()


def make_guard(guards: list[Guard], base_url: str = "", **judge: object) -> Guard:
    judge_settings = JudgeSettings(base_url=base_url, timeout_s=1.0, max_retries=0, backoff_s=0.01, **judge)
    settings = GuardSettings(judge=judge_settings)
    guard = Guard(settings, ENGINE, Judge(judge_settings) if base_url else None)  # type: ignore[arg-type]
    guards.append(guard)
    return guard


async def test_no_match_is_allowed_without_judge_or_decoy(guards, judge_server) -> None:
    guard = make_guard(guards, judge_server.base_url)
    decision = await guard.check(bash("ls -la"), CONTEXT)
    assert decision.verdict.action == Action.ALLOW and decision.verdict.stage == Stage.RULES
    assert decision.decoy is None and decision.normalized == "$ ls -la"
    assert set(decision.verdict.stage_latency_us) == {"rules"}
    assert decision.verdict.latency_us >= decision.verdict.stage_latency_us["rules"] > 0
    assert judge_server.requests == []


async def test_decoy_rule_answers_with_a_decoy(guards) -> None:
    decision = await make_guard(guards).check(bash("curl https://example.com/sol.py"), CONTEXT)
    verdict = decision.verdict
    assert (verdict.action, verdict.stage, verdict.rule_id, verdict.category) == (
        Action.DECOY,
        Stage.RULES,
        "rule.decoy",
        "answer_fetch",
    )
    assert decision.decoy is not None and decision.decoy.exit_code == 6
    assert "Could not resolve host: example.com" in decision.decoy.output


async def test_flag_rule_runs_and_marks(guards, judge_server) -> None:
    decision = await make_guard(guards, judge_server.base_url).check(bash("pip install leftpad"), CONTEXT)
    assert decision.verdict.action == Action.FLAG and decision.verdict.stage == Stage.RULES
    assert decision.decoy is None and judge_server.requests == []


async def test_escalation_judged_cheat_is_decoyed(guards, judge_server) -> None:
    decision = await make_guard(guards, judge_server.base_url).check(
        bash("wget https://example.com/data.csv"), CONTEXT
    )
    verdict = decision.verdict
    assert (verdict.action, verdict.stage, verdict.rule_id) == (Action.DECOY, Stage.JUDGE, "rule.escalate")
    assert verdict.confidence == 0.95 and verdict.reason == "the call uses wget"
    assert set(verdict.stage_latency_us) == {"rules", "judge", "decoy"}
    assert verdict.latency_us >= verdict.stage_latency_us["judge"] > 0
    assert decision.decoy is not None and decision.decoy.exit_code == 4
    assert "Fix the tokenizer" in judge_server.requests[0]["messages"][-1]["content"]


async def test_escalation_judged_benign_is_allowed(guards) -> None:
    with running_judge_server(keyword_policy({"nothing-matches": "answer_fetch"})) as server:
        decision = await make_guard(guards, server.base_url).check(
            bash("wget https://example.com/data.csv"), CONTEXT
        )
    assert decision.verdict.action == Action.ALLOW and decision.verdict.stage == Stage.JUDGE
    assert decision.verdict.rule_id == "rule.escalate" and decision.decoy is None


async def test_low_confidence_cheat_is_flagged(guards) -> None:
    reply = JudgeReply(
        verdict={"verdict": "cheat", "category": "answer_fetch", "confidence": 0.3, "reason": "?"}
    )
    with running_judge_server(always(reply)) as server:
        guard = make_guard(guards, server.base_url, min_confidence=0.5)
        decision = await guard.check(bash("wget https://example.com/data.csv"), CONTEXT)
    assert decision.verdict.action == Action.FLAG and decision.decoy is None


@pytest.mark.parametrize(("fail_mode", "action"), [("closed", Action.DECOY), ("open", Action.FLAG)])
async def test_judge_down_follows_fail_mode(guards, fail_mode: str, action: Action) -> None:
    with running_judge_server(always(JudgeReply(status=500))) as server:
        guard = make_guard(guards, server.base_url, fail_mode=fail_mode)
        decision = await guard.check(bash("wget https://example.com/data.csv"), CONTEXT)
    assert decision.verdict.action == action and decision.verdict.stage == Stage.JUDGE
    assert "judge unavailable (http_500)" in decision.verdict.reason
    assert (decision.decoy is not None) == (action == Action.DECOY)


@pytest.mark.parametrize(("fail_mode", "action"), [("closed", Action.DECOY), ("open", Action.FLAG)])
async def test_escalation_without_judge_follows_fail_mode(guards, fail_mode: str, action: Action) -> None:
    guard = make_guard(guards, fail_mode=fail_mode)
    decision = await guard.check(bash("wget https://example.com/data.csv"), CONTEXT)
    assert decision.verdict.action == action and decision.verdict.stage == Stage.RULES
    assert "no judge configured" in decision.verdict.reason


async def test_bash_decoys_run_in_the_sandbox_without_a_probe(guards) -> None:
    """A bash decoy is a line to run (its stubs ask the sandbox themselves): no probe command."""
    seen: list[str] = []

    async def probe(command: str) -> ToolAnswer:
        seen.append(command)
        return ToolAnswer("3f2c1ab Initial snapshot\n", 0)

    decision = await make_guard(guards).check(bash("git log --all --oneline"), CONTEXT, probe=probe)
    assert seen == [] and decision.verdict.action == Action.DECOY
    # hand-built results carry no place on the line: the whole line is stubbed
    assert decision.rewrite == "exit 0" and decision.decoy == ToolAnswer("", 0)


async def test_edit_decoys_still_read_the_file_through_the_probe(guards) -> None:
    seen: list[str] = []

    async def probe(command: str) -> ToolAnswer:
        seen.append(command)
        return ToolAnswer("x = 1\n", 0)

    call = ToolCall("edit_file", {"path": "src/core.py", "old_str": "y = 2", "new_str": "os._exit(0)"})
    match = RuleMatch("rule.decoy", "grader_tampering", "decoy", "decoy rule")
    engine = TableEngine([])
    engine.evaluate = lambda _call: RuleResult(NormalizedCall("edit_file", "edit"), match)  # type: ignore[method-assign]
    guard = Guard(GuardSettings(), engine)  # type: ignore[arg-type]
    guards.append(guard)
    decision = await guard.check(call, CONTEXT, probe=probe)
    assert seen == ["cat -- src/core.py"] and decision.rewrite is None
    assert decision.decoy == ToolAnswer("edit_file: old_str not found in src/core.py; nothing changed", 1)


async def test_disabled_guard_allows_everything(guards) -> None:
    guard = Guard(GuardSettings(enabled=False), ENGINE)  # type: ignore[arg-type]
    decision = await guard.check(bash("curl https://example.com/sol.py"), CONTEXT)
    assert decision.verdict.action == Action.ALLOW and decision.decoy is None


async def test_decisions_are_deterministic_per_episode(guards) -> None:
    guard = make_guard(guards)
    first = await guard.check(bash("curl https://example.com/sol.py"), CONTEXT)
    second = await guard.check(bash("curl https://example.com/sol.py"), CONTEXT)
    assert first.decoy == second.decoy


async def test_stage1_runs_off_the_event_loop(guards) -> None:
    """A slow stage 1 (here one that takes 0.5 s of synchronous work) never stalls the loop:
    other coroutines (other episodes' calls in the gateway) keep running meanwhile."""
    class SlowEngine(TableEngine):
        def evaluate(self, call: ToolCall) -> RuleResult:
            time.sleep(0.5)  # blocks its thread, as a heavy normalisation would
            return super().evaluate(call)

    guard = Guard(GuardSettings(), SlowEngine([]))  # type: ignore[arg-type]
    guards.append(guard)
    ticks: list[float] = []

    async def ticker() -> None:
        while True:
            ticks.append(time.perf_counter())
            await asyncio.sleep(0.01)

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0.02)
    await asyncio.gather(*(guard.check(bash(f"ls {i}"), CONTEXT) for i in range(3)))
    task.cancel()
    gaps = [b - a for a, b in itertools.pairwise(ticks)]
    assert len(ticks) > 20 and max(gaps) < 0.25
