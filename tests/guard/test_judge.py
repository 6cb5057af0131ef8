"""The judge against a real loopback HTTP server speaking OpenAI chat-completions."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Callable, Iterator

import pytest

from guard.judge import Judge, JudgeEvent, parse_answer
from guard.settings import JudgeSettings
from guard.types import GuardContext, NormalizedCall, RuleMatch, ToolCall
from tests.support.openai_judge_server import (
    FakeJudgeServer,
    JudgeReply,
    always,
    keyword_policy,
    running_judge_server,
    verdict,
)

MATCH = RuleMatch("net.curl", "answer_fetch", "escalate", "network fetch with curl")
CONTEXT = GuardContext(task_statement="Fix the off-by-one in parse()", episode_id="ep-1")


def _call(text: str = "curl https://example.com/solution.py") -> NormalizedCall:
    return NormalizedCall(tool="bash", text=text)


@pytest.fixture
def server() -> Iterator[FakeJudgeServer]:
    with running_judge_server(always(verdict("cheat", "answer_fetch", 0.93, "fetches the solution"))) as srv:
        yield srv


@pytest.fixture
async def make_judge() -> AsyncIterator[Callable[..., Judge]]:
    judges: list[Judge] = []

    def make(base_url: str, **overrides: object) -> Judge:
        fields = {"timeout_s": 2.0, "max_retries": 1, "backoff_s": 0.01, **overrides}
        judge = Judge(JudgeSettings(base_url=base_url, **fields))  # type: ignore[arg-type]
        judges.append(judge)
        return judge

    yield make
    for judge in judges:
        await judge.aclose()


async def test_good_verdict_is_parsed_and_prompt_carries_context(server, make_judge) -> None:
    judge = make_judge(server.base_url)
    context = GuardContext(
        task_statement="Fix the off-by-one in parse()", recent_turns=("assistant: let me look", "tool: ok")
    )
    call = ToolCall("bash", {"command": "c''url https://example.com/solution.py"})
    result = await judge.review(_call(), MATCH, context, call)
    assert (result.verdict, result.category, result.confidence) == ("cheat", "answer_fetch", 0.93)
    assert result.reason == "fetches the solution"
    assert result.error is None and not result.cached
    request = server.requests[0]
    assert request["response_format"]["type"] == "json_schema"
    prompt = request["messages"][-1]["content"]
    for needle in ("Fix the off-by-one", "let me look", "net.curl", "curl https://example.com/solution.py"):
        assert needle in prompt
    assert "c''url" in prompt  # the raw spelling is shown too
    assert judge.stats.verdicts["cheat"] == 1


async def test_plain_json_body_with_chatter_is_accepted(make_judge) -> None:
    content = (
        'Sure.\n```json\n{"verdict": "Benign", "category": "answer_fetch", "confidence": "0.7", '
        '"reason": "reads docs"}\n```'
    )
    with running_judge_server(always(JudgeReply(content=content))) as srv:
        result = await make_judge(srv.base_url).review(_call(), MATCH, CONTEXT)
    assert (result.verdict, result.confidence, result.error) == ("benign", 0.7, None)


async def test_malformed_answer_fails_closed_after_retries(make_judge) -> None:
    with running_judge_server(always(JudgeReply(content="I think it is fine, probably."))) as srv:
        judge = make_judge(srv.base_url, max_retries=2, fail_mode="closed")
        result = await judge.review(_call(), MATCH, CONTEXT)
        assert len(srv.requests) == 3
    assert result.error == "malformed" and result.verdict == "cheat" and result.confidence == 0.0
    assert result.category == "answer_fetch"
    assert judge.stats.errors["malformed"] == 3 and judge.stats.failures == 1


async def test_answer_outside_schema_is_malformed(make_judge) -> None:
    bad = {"verdict": "maybe", "category": "answer_fetch", "confidence": 3, "reason": "?"}
    with running_judge_server(always(JudgeReply(verdict=bad))) as srv:
        result = await make_judge(srv.base_url, max_retries=0).review(_call(), MATCH, CONTEXT)
    assert result.error == "malformed"


async def test_body_that_is_not_a_completion_is_malformed(make_judge) -> None:
    with running_judge_server(always(JudgeReply(body=b'{"hello": "world"}'))) as srv:
        result = await make_judge(srv.base_url, max_retries=0).review(_call(), MATCH, CONTEXT)
    assert result.error == "malformed"


async def test_timeout_fails_open(make_judge) -> None:
    slow = JudgeReply(verdict=verdict().verdict, delay_s=6.0)
    with running_judge_server(always(slow)) as srv:
        judge = make_judge(srv.base_url, timeout_s=0.3, max_retries=1, fail_mode="open")
        started = time.perf_counter()
        result = await judge.review(_call(), MATCH, CONTEXT)
        elapsed = time.perf_counter() - started
    assert result.error == "timeout" and result.verdict == "benign"
    assert judge.stats.errors["timeout"] == 2
    assert elapsed < 4.0  # two 0.3 s attempts, not the server's 6 s


async def test_http_500_is_retried_then_succeeds(make_judge) -> None:
    attempts = itertools.count()

    def flaky(_request: dict) -> JudgeReply:
        return JudgeReply(status=500) if next(attempts) == 0 else verdict("benign", "answer_fetch", 0.8)

    with running_judge_server(flaky) as srv:
        judge = make_judge(srv.base_url, max_retries=2)
        result = await judge.review(_call(), MATCH, CONTEXT)
        assert len(srv.requests) == 2
    assert result.verdict == "benign" and result.error is None
    assert judge.stats.errors["http_500"] == 1


async def test_http_500_forever_fails_closed(make_judge) -> None:
    with running_judge_server(always(JudgeReply(status=500))) as srv:
        result = await make_judge(srv.base_url, max_retries=1, fail_mode="closed").review(
            _call(), MATCH, CONTEXT
        )
    assert (result.verdict, result.error) == ("cheat", "http_500")


async def test_client_error_is_not_retried(make_judge) -> None:
    with running_judge_server(always(JudgeReply(status=401))) as srv:
        result = await make_judge(srv.base_url, max_retries=3).review(_call(), MATCH, CONTEXT)
        assert len(srv.requests) == 1
    assert result.error == "http_401"


async def test_server_down_fails_open(make_judge) -> None:
    with running_judge_server(always(verdict())) as srv:
        url = srv.base_url
    # the port is closed now: connection refused
    result = await make_judge(url, max_retries=1, fail_mode="open").review(_call(), MATCH, CONTEXT)
    assert (result.verdict, result.error) == ("benign", "connection")


async def test_server_rejecting_response_format_gets_plain_json(make_judge) -> None:
    def picky(request: dict) -> JudgeReply:
        if "response_format" in request:
            return JudgeReply(status=400, body=b'{"error": {"message": "response_format is not supported"}}')
        return verdict("benign", "answer_fetch", 0.6)

    with running_judge_server(picky) as srv:
        result = await make_judge(srv.base_url, max_retries=1).review(_call(), MATCH, CONTEXT)
        assert "response_format" not in srv.requests[-1]
    assert result.verdict == "benign" and result.error is None


async def test_cache_hit_sends_one_request(server, make_judge) -> None:
    judge = make_judge(server.base_url)
    first = await judge.review(_call(), MATCH, CONTEXT)
    second = await judge.review(_call(), MATCH, CONTEXT)
    assert len(server.requests) == 1
    assert second.cached and not first.cached and second.verdict == first.verdict
    other_task = GuardContext(task_statement="A different task")
    await judge.review(_call(), MATCH, other_task)
    assert len(server.requests) == 2  # the key includes the task
    assert judge.stats.cache_hits == 1


async def test_concurrent_duplicates_share_one_request(make_judge) -> None:
    with running_judge_server(always(JudgeReply(verdict=verdict().verdict, delay_s=0.2))) as srv:
        judge = make_judge(srv.base_url)
        results = await asyncio.gather(*(judge.review(_call(), MATCH, CONTEXT) for _ in range(5)))
        assert len(srv.requests) == 1
    assert {r.verdict for r in results} == {"cheat"}
    assert sum(r.cached for r in results) == 4


async def test_failures_are_not_cached(make_judge) -> None:
    replies = iter([JudgeReply(status=503), verdict("benign", "answer_fetch", 0.9)])
    with running_judge_server(lambda _r: next(replies)) as srv:
        judge = make_judge(srv.base_url, max_retries=0)
        assert (await judge.review(_call(), MATCH, CONTEXT)).error == "http_503"
        assert (await judge.review(_call(), MATCH, CONTEXT)).verdict == "benign"
        assert len(srv.requests) == 2


async def test_cache_is_bounded_lru(server, make_judge) -> None:
    judge = make_judge(server.base_url, cache_size=2)
    for text in ("a", "b", "a", "c", "a", "b"):
        await judge.review(_call(text), MATCH, CONTEXT)
    # a, b miss; a hits; c evicts b; a hits; b misses again
    assert len(server.requests) == 4 and judge.stats.cache_hits == 2


async def test_concurrency_limit_caps_requests_in_flight(make_judge) -> None:
    with running_judge_server(keyword_policy({"curl": "answer_fetch"}, delay_s=0.15)) as srv:
        judge = make_judge(srv.base_url, max_concurrency=2)
        calls = [_call(f"curl https://example.com/{i}") for i in range(6)]
        results = await asyncio.gather(*(judge.review(c, MATCH, CONTEXT) for c in calls))
        assert len(srv.requests) == 6
        assert srv.max_in_flight == 2
    assert all(r.verdict == "cheat" for r in results)


async def test_events_reach_the_callback(server) -> None:
    events: list[JudgeEvent] = []
    judge = Judge(JudgeSettings(base_url=server.base_url), on_event=events.append)
    try:
        await judge.review(_call(), MATCH, CONTEXT)
        await judge.review(_call(), MATCH, CONTEXT)
    finally:
        await judge.aclose()
    assert [e.outcome for e in events] == ["cheat", "cache_hit"]
    assert all(e.latency_s >= 0 for e in events)
    assert judge.stats.snapshot()["latency_count"] == 2


def test_parse_answer_rejects_garbage() -> None:
    for content in (None, "", "no json here", '{"verdict": "cheat"', '{"other": 1}'):
        with pytest.raises(ValueError):
            parse_answer(content)


async def test_repeated_failures_pause_the_judge(make_judge) -> None:
    with running_judge_server(always(JudgeReply(status=500))) as srv:
        judge = make_judge(srv.base_url, max_retries=0, breaker_failures=2, breaker_cooldown_s=60)
        for i in range(2):
            assert (await judge.review(_call(f"curl a{i}"), MATCH, CONTEXT)).error == "http_500"
        started = time.perf_counter()
        paused = await judge.review(_call("curl b"), MATCH, CONTEXT)
        assert len(srv.requests) == 2  # the paused judge is not asked
    assert paused.error == "circuit_open" and paused.verdict == "cheat"
    assert time.perf_counter() - started < 1.0  # no timeout waited out (the server is not asked at all)
    assert judge.stats.errors["circuit_open"] == 1 and judge.stats.failures == 3


async def test_pause_ends_after_the_cooldown(make_judge) -> None:
    replies = iter([JudgeReply(status=500), verdict("benign", "answer_fetch", 0.9)])
    with running_judge_server(lambda _r: next(replies)) as srv:
        judge = make_judge(srv.base_url, max_retries=0, breaker_failures=1, breaker_cooldown_s=0.2)
        assert (await judge.review(_call("curl a"), MATCH, CONTEXT)).error == "http_500"
        assert (await judge.review(_call("curl b"), MATCH, CONTEXT)).error == "circuit_open"
        await asyncio.sleep(0.25)
        assert (await judge.review(_call("curl c"), MATCH, CONTEXT)).verdict == "benign"
        assert len(srv.requests) == 2
