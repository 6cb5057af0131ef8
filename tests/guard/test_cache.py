"""The content-hash cache of stage 1: same call, same reading and match; bounded; never shares an
episode's memory or repository context between calls."""

from __future__ import annotations

from guard.cache import NormalizeCache
from guard.memory import EpisodeMemory
from guard.normalize import normalize
from guard.rules import RuleEngine
from guard.types import ToolCall


def test_identical_calls_share_one_reading() -> None:
    cache = NormalizeCache()
    first = cache.get(ToolCall("bash", {"command": "ls -la"}))
    again = cache.get(ToolCall("bash", {"command": "ls -la"}))
    other = cache.get(ToolCall("bash", {"command": "ls -l"}))
    assert again is first and other is not first
    assert (cache.hits, cache.misses) == (1, 2)


def test_cache_is_bounded_by_entries_and_size() -> None:
    cache = NormalizeCache(max_entries=2, max_chars=10_000, max_call_chars=1_000)
    for i in range(4):
        cache.get(ToolCall("bash", {"command": f"echo {i}"}))
    assert len(cache._entries) == 2
    big = ToolCall("write_file", {"path": "a.py", "content": "x = 1\n" * 500})
    assert cache.get(big) is not cache.get(big)  # over max_call_chars: never cached


def test_a_cached_match_is_not_reused_when_the_episode_changes_the_reading() -> None:
    engine = RuleEngine.load()
    run = ToolCall("bash", {"command": "python go.py"})
    assert engine.evaluate(run).match is None  # cached: nothing known about go.py
    memory = EpisodeMemory()
    script = ToolCall(
        "write_file", {"path": "/workspace/go.py", "content": "import grader\ngrader.grade = lambda *a: 1\n"}
    )
    memory.observe(script, normalize(script))
    hit = engine.evaluate(run, memory).match
    assert hit is not None and hit.action == "decoy"
    assert engine.evaluate(run).match is None  # another episode: still nothing known


def test_skipping_rules_by_fact_kind_changes_no_decision() -> None:
    """The fact-kind index (a rule whose facts are all ``^assign:...`` is skipped when the call has
    no ``assign:`` fact) is only a shortcut: every corpus row gets the same rule with and without it."""
    from pathlib import Path

    from guard.eval import load_corpus
    from guard.rule_index import fact_prefixes

    fast = RuleEngine.load()
    slow = RuleEngine.load()
    slow._call_kinds, slow._code_kinds = {}, {}
    here = Path(__file__).parent
    files = [*here.glob("corpus*.jsonl"), here.parent / "redteam" / "guard_heldout.jsonl"]
    for path in files:
        for row in load_corpus(path):
            normalized = normalize(row.call)
            a, b = fast.match(normalized), slow.match(normalized)
            assert (a and a.rule_id) == (b and b.rule_id), (path.name, row.line)
    assert fact_prefixes("^(edit|append):") == {"edit", "append"}
    assert fact_prefixes("^assign:x|TestReport") is None  # an alternative without a kind: always checked
    assert fact_prefixes("^toplevel_exit(_cond)?:os_exit$") is None
