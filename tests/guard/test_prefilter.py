"""Literal pre-filters never skip a regex that would match (``guard.prefilter``).

Checked three ways: hand-made patterns with branches, repeats, groups and case folding; every
regex of the built-in rule pack against every text the corpora give it (arguments, joined
arguments, facts, code); and generated strings built from each pattern's own literals."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from guard.eval import load_corpus
from guard.normalize import normalize
from guard.prefilter import may_match, required_literals
from guard.rule_match import joined_facts
from guard.rules import RuleEngine

HERE = Path(__file__).parent


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        (r"(docker|containerd)\.sock", {"docker", "containerd"}),  # the longer of two requirements
        (r"^env:HUSKY=0$", {"env:HUSKY=0"}),
        (r"(?:foo|barbaz)qux", {"qux"}),
        (r"(?:alpha|beta)", {"alpha", "beta"}),
        (r"a*bcd", {"bcd"}),
        (r"(?:xyz)+", {"xyz"}),
        (r"(?:xyz)?", None),
        (r"[abc]+", None),
        (r"(?i)Secret", {"secret"}),
        (r"(?:ab|c)", None),  # one alternative shorter than the minimum
    ],
)
def test_required_literals(pattern: str, expected: set[str] | None) -> None:
    found = required_literals(pattern, 0)
    assert (found[0] if found else None) == (frozenset(expected) if expected else None)


def test_case_insensitive_patterns_are_not_filtered_on_non_ascii_text() -> None:
    literals = required_literals(r"(?i)skip", 0)
    assert re.search(r"(?i)skip", "\u017fkip")  # the regex folds the long s
    assert may_match(literals, "\u017fkip")


def _texts() -> list[tuple[str, str]]:
    """(kind, text) every regex of a rule may be run over, from all corpora."""
    out: list[tuple[str, str]] = []
    for path in [*HERE.glob("corpus*.jsonl"), HERE.parent / "redteam" / "guard_heldout.jsonl"]:
        for row in load_corpus(path):
            n = normalize(row.call)
            out.append(("fact", joined_facts(n.facts)))
            for c in n.commands:
                out.extend(("arg", a) for a in c.argv[1:])
                out.append(("args", " ".join(c.argv[1:])))
            for b in n.blocks:
                out.extend((("code_text", b.text), ("code_fact", joined_facts(b.facts))))
    return out


def test_no_rule_regex_is_skipped_where_it_matches() -> None:
    engine = RuleEngine.load()
    texts = _texts()
    checked = 0
    for rule in engine.rules:
        pairs = [
            ("arg", rule.arg, rule.arg_literals),
            ("args", rule.args, rule.args_literals),
            ("fact", rule.fact, rule.fact_literals),
        ]
        if rule.code is not None:
            pairs += [
                ("code_text", rule.code.text, rule.code.text_literals),
                ("code_fact", rule.code.fact, rule.code.fact_literals),
            ]
        for kind, regex, literals in pairs:
            if regex is None or literals is None:
                continue
            for text_kind, text in texts:
                if text_kind == kind and regex.search(text):
                    checked += 1
                    assert may_match(literals, text), (rule.id, kind, text[:120])
    assert checked > 500


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_generated_matches_pass_the_filter(data: st.DataObject) -> None:
    engine = RuleEngine.load()
    regexes = [r for rule in engine.rules for r in (rule.arg, rule.args, rule.fact) if r is not None]
    regex = data.draw(st.sampled_from(regexes))
    literals = required_literals(regex.pattern, regex.flags)
    text = data.draw(st.from_regex(regex, alphabet=st.characters(max_codepoint=0x17F)))
    assert regex.search(text)
    assert may_match(literals, text), (regex.pattern, text)
