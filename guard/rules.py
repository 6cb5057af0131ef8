"""Stage 1: YAML rules over the normalised call; tuned for recall, cheap enough for every call.

Rule files are described in ``guard.rule_spec``; each rule is compiled once
(``guard.rule_match``). Rules are checked most severe first (decoy, escalate, flag), in file
order within an action, and the first hit wins: one pass, regexes compiled once at load, most
rules skipped by the indexes of ``guard.rule_index``. A call that cannot be parsed is escalated
(category ``unparseable``) whatever the files say.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import yaml
from pydantic import ValidationError

from guard.cache import NormalizeCache
from guard.context import enrich
from guard.integrity import Surface
from guard.paths import ProtectedPaths
from guard.rule_index import fact_gate, fact_kinds, fact_prefixes, kind_index
from guard.rule_match import Rule, Shape
from guard.rule_spec import RuleFileError, RuleSpec
from guard.settings import DEFAULT_PROTECTED_PATHS, GuardSettings
from guard.types import Integrity, NormalizedCall, RuleMatch, RuleResult, ToolCall

if TYPE_CHECKING:
    from guard.memory import EpisodeMemory
    from guard.repo import RepoContext

BUILTIN_PACK = Path(__file__).parent / "rulepacks" / "builtin.yaml"
SEVERITY = {"decoy": 0, "escalate": 1, "flag": 2}
UNPARSEABLE_RULE_ID = "builtin.unparseable"


def _read_rule_file(path: Path) -> list[Rule]:
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise RuleFileError(f"{path}: cannot read rule file: {exc}") from exc
    except yaml.YAMLError as exc:
        raise RuleFileError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(raw, dict) or not isinstance(raw.get("rules"), list):
        raise RuleFileError(f"{path}: expected a mapping with a 'rules' list")
    rules: list[Rule] = []
    for i, item in enumerate(raw["rules"]):
        try:
            spec = RuleSpec.model_validate(item)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(x) for x in first["loc"])
            raise RuleFileError(f"{path}: rule #{i + 1} ({where}): {first['msg']}") from exc
        rules.append(Rule.compile(spec, str(path)))
    return rules


class RuleEngine:
    """The built-in pack plus user rule files, compiled once; ``evaluate`` is one pass per call."""

    def __init__(
        self, rules: Sequence[Rule], protected_paths: Sequence[str], integrity: Integrity | None = None
    ) -> None:
        seen: set[str] = set()
        for rule in rules:
            if rule.id in seen:
                raise RuleFileError(f"duplicate rule id {rule.id!r}")
            seen.add(rule.id)
        order = {id(r): i for i, r in enumerate(rules)}
        self._rules_in_file_order = tuple(rules)
        self.rules = tuple(sorted(rules, key=lambda r: (SEVERITY[r.action], order[id(r)])))
        # readings of calls seen before, by content hash, with this engine's match for each
        self.normalize_cache = NormalizeCache()
        self.integrity = integrity or Integrity()
        self.surface = Surface(self.integrity)
        # @hidden (@protected): the configured hidden paths and the task's own (``protected_paths``),
        # matched on every path a call names; the integrity surface's hidden globs are matched on
        # what the call reads (its effects: ``guard.integrity``), so a broad glob is not a read
        self.protected = ProtectedPaths(protected_paths)
        # Index: rules naming programs are reached through the programs a call runs; the rest
        # are pre-filtered on what they need (facts, code, paths, commands) before any regex.
        self._by_program: dict[str, list[int]] = {}
        self._general: list[tuple[int, Rule]] = []
        self._call_fact_gate: tuple[re.Pattern[str], frozenset[int]] | None = None
        self._code_fact_gate: tuple[re.Pattern[str], frozenset[int]] | None = None
        self._general_for: dict[Shape, tuple[int, ...]] = {}
        for i, rule in enumerate(self.rules):
            if rule.programs is not None:
                for program in rule.programs:
                    self._by_program.setdefault(program, []).append(i)
            else:
                self._general.append((i, rule))
        # Gates: one combined search decides that none of a group's fact regexes can match, so the
        # group is skipped without evaluating its rules one by one (most calls match no fact rule).
        # Fact kinds: a rule whose fact regex can only match facts of some kinds (``^assign:``,
        # ``^(edit|append):``) is skipped when the call has no fact of those kinds.
        self._call_kinds = {
            i: k for i, r in enumerate(self.rules) if (k := fact_prefixes(r.fact.pattern if r.fact else None))
        }
        self._code_kinds = {
            i: k
            for i, r in enumerate(self.rules)
            if r.code is not None and (k := fact_prefixes(r.code.fact.pattern if r.code.fact else None))
        }
        # inverted: for each fact kind, the kind-restricted rules it lets through (set operations
        # per call instead of a pass over every rule)
        self._call_kinded, self._call_kind_index = kind_index(self._call_kinds)
        self._code_kinded, self._code_kind_index = kind_index(self._code_kinds)
        self._call_fact_gate = fact_gate(
            self.rules, (i for i, r in self._general if r.fact is not None), False
        )
        self._code_fact_gate = fact_gate(
            self.rules, (i for i, r in self._general if r.code is not None and r.code.fact is not None), True
        )

    @classmethod
    def load(
        cls,
        rule_files: Sequence[Path] = (),
        protected_paths: Sequence[str] = DEFAULT_PROTECTED_PATHS,
        include_builtin: bool = True,
        integrity: Integrity | None = None,
    ) -> RuleEngine:
        """Compile the built-in pack (unless excluded) and ``rule_files``, in that order."""
        files = ([BUILTIN_PACK] if include_builtin else []) + [Path(p) for p in rule_files]
        rules = [rule for f in files for rule in _read_rule_file(f)]
        return cls(rules, protected_paths, integrity)

    @classmethod
    def from_settings(
        cls,
        settings: GuardSettings,
        extra_protected_paths: Sequence[str] = (),
        integrity: Integrity | None = None,
    ) -> RuleEngine:
        """The engine for one task: settings' rule files and protected paths plus the task's own
        protected paths and integrity surface."""
        return cls.load(
            settings.rule_files, [*settings.protected_paths, *extra_protected_paths], integrity=integrity
        )

    def for_task(self, protected_paths: Sequence[str], integrity: Integrity | None) -> RuleEngine:
        """The same compiled rules with another task's hidden paths and integrity surface (its own
        cache: readings are per engine)."""
        return RuleEngine(self._rules_in_file_order, protected_paths, integrity)

    def match(self, normalized: NormalizedCall) -> RuleMatch | None:
        """The most severe rule hit on an already normalised call (None: nothing matched)."""
        if normalized.parse_error is not None:
            return RuleMatch(
                UNPARSEABLE_RULE_ID,
                "unparseable",
                "escalate",
                f"cannot be read statically: {normalized.parse_error}",
            )
        programs = {c.program for c in normalized.commands}
        candidates: set[int] = set()
        for program in programs:
            candidates.update(self._by_program.get(program, ()))
        kinds = frozenset((b.lang, b.origin) for b in normalized.blocks)
        shape = (normalized.tool, bool(normalized.facts), kinds, bool(normalized.paths), bool(programs))
        general = self._general_for.get(shape)
        if general is None:
            general = tuple(i for i, rule in self._general if rule.needs_any(shape))
            if len(self._general_for) < 4096:  # shapes are few; the bound only guards odd tools
                self._general_for[shape] = general
        code_facts = [f for b in normalized.blocks for f in b.facts]
        call_kinds, code_kinds = fact_kinds(normalized.facts), fact_kinds(code_facts)
        skip = set(self._call_kinded.difference(*(self._call_kind_index.get(k, ()) for k in call_kinds)))
        skip.update(self._code_kinded.difference(*(self._code_kind_index.get(k, ()) for k in code_kinds)))
        for gate, facts in ((self._call_fact_gate, normalized.facts), (self._code_fact_gate, code_facts)):
            if gate is not None and not gate[1] <= skip and not gate[0].search("\n".join(facts)):
                skip.update(gate[1])
        order = sorted(candidates.union(general)) if candidates else general
        for i in order:
            if i in skip:
                continue
            hit = self.rules[i].evaluate(normalized, programs, self.protected)
            if hit is not None:
                return hit
        return None

    def evaluate(
        self, call: ToolCall, memory: EpisodeMemory | None = None, repo: RepoContext | None = None
    ) -> RuleResult:
        """Normalise ``call``, add what the episode's ``memory`` and the task's ``repo`` know about
        it, and match it; ``latency_us`` covers all three."""
        start = time.perf_counter()
        entry = self.normalize_cache.get(call)
        normalized = enrich(entry.normalized, memory, repo, call)
        if self.surface:
            normalized = self.surface.annotate(normalized, memory.aliases if memory is not None else None)
        if normalized is not entry.normalized:  # the episode added something: match afresh
            hit = self.match(normalized)
        elif entry.matched:
            hit = entry.match  # type: ignore[assignment]
        else:
            hit = self.match(normalized)
            entry.match, entry.matched = hit, True
        return RuleResult(normalized, hit, (time.perf_counter() - start) * 1e6)
