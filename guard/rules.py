"""Stage 1: YAML rules over the normalised call; tuned for recall, cheap enough for every call.

A rule file is ``rules: [ {id, category, description, action, match: {...}} ]``. Every key of
``match`` that is present must hold (AND):

- ``tool``: tool names; ``program``: program names (after normalisation), with ``arg`` /
  ``arg_not`` (a regex some single argument matches / that this argument must not match),
  ``args`` / ``args_not`` (regex over the arguments joined by spaces) and ``source`` (regex over
  where the command was found: ``bash``, ``bash -c``, ``python subprocess``, ...);
- ``paths``: globs (``**`` crosses directories) over the absolute paths the call touches, or
  ``"@protected"`` for the protected-path set; ``path_not``: a regex such a path must not match;
- ``fact`` / ``fact_not``: regex over call-level facts (``write:…``, ``delete:…``, ``dynamic_program:…``);
- ``code``: a block of code with ``lang``, ``origin`` (run|write), ``path`` globs (``path_not``), ``fact`` /
  ``fact_not`` (regex over facts read from the code, e.g. its AST), ``text`` / ``text_not`` (regex
  its text must / must not match).

Rules are checked most severe first (decoy, escalate, flag), in file order within an action, and
the first hit wins: one pass, regexes compiled once at load. A call that cannot be parsed is
escalated (category ``unparseable``) whatever the files say.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from guard.cache import NormalizeCache
from guard.context import enrich
from guard.errors import GuardError
from guard.paths import ProtectedPaths
from guard.settings import DEFAULT_PROTECTED_PATHS, GuardSettings
from guard.types import CodeBlock, Command, NormalizedCall, RuleMatch, RuleResult, ToolCall

if TYPE_CHECKING:
    from guard.memory import EpisodeMemory
    from guard.repo import RepoContext

BUILTIN_PACK = Path(__file__).parent / "rulepacks" / "builtin.yaml"
SEVERITY = {"decoy": 0, "escalate": 1, "flag": 2}
PROTECTED = "@protected"


class RuleFileError(GuardError):
    """A rule file that cannot be loaded: named with its path and the reason."""


class CodeSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    lang: list[str] | None = None
    origin: list[Literal["run", "write"]] | None = None
    path: list[str] | None = None
    path_not: str | None = None
    fact: str | None = None
    fact_not: str | None = None
    text: str | None = None
    text_not: str | None = None


class MatchSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tool: list[str] | None = None
    program: list[str] | None = None
    source: str | None = None
    arg: str | None = None
    arg_not: str | None = None
    args: str | None = None
    args_not: str | None = None
    paths: list[str] | None = None
    path_not: str | None = None
    fact: str | None = None
    fact_not: str | None = None
    code: CodeSpec | None = None


class RuleSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1)
    category: str = Field(min_length=1)
    description: str = ""
    action: Literal["decoy", "escalate", "flag"]
    match: MatchSpec

    @field_validator("match")
    @classmethod
    def _not_empty(cls, value: MatchSpec) -> MatchSpec:
        if not value.model_dump(exclude_none=True):
            raise ValueError("match must hold at least one condition")
        return value


def glob_regex(pattern: str) -> str:
    """Path glob to regex: ``**`` spans directories, ``*`` and ``?`` stay inside one."""
    out: list[str] = []
    i = 0
    if pattern.startswith("**/"):
        # a leading ``**/`` is what the unanchored ``(?:^|/)`` prefix already means; spelling it as
        # ``(?:.*/)?`` made every search backtrack over the whole path (quadratic in its length)
        i = 3
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    body = "".join(out)
    return f"^{body}$" if pattern.startswith("/") else f"(?:^|/){body}$"


def _rx(pattern: str | None, where: str) -> re.Pattern[str] | None:
    if pattern is None:
        return None
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise RuleFileError(f"{where}: bad regex {pattern!r}: {exc}") from exc


def _fact_rx(pattern: str | None, where: str) -> re.Pattern[str] | None:
    """Fact regexes run once over all facts joined by newlines (one search per rule, not one
    per fact): ``^``/``$`` anchor per fact, and negated classes must not cross into the next one."""
    if pattern is None:
        return None
    _rx(pattern, where)  # report errors against the pattern as written
    return re.compile(re.sub(r"(?<!\\)\[\^", "[^\\n", pattern), re.MULTILINE)


@functools.lru_cache(maxsize=64)
def _joined(facts: tuple[str, ...]) -> str:
    """Facts as one string; cached because every rule of one call asks for the same join."""
    return "\n".join(facts)


def _globs(patterns: list[str] | None) -> tuple[re.Pattern[str] | None, bool]:
    if not patterns:
        return None, False
    protected = PROTECTED in patterns
    plain = [glob_regex(p) for p in patterns if p != PROTECTED]
    return (re.compile("|".join(plain)) if plain else None), protected


# what a call offers rules: tool, has facts, (lang, origin) of its code blocks, has paths, has commands
_Shape = tuple[str, bool, frozenset[tuple[str, str]], bool, bool]


@dataclass(frozen=True)
class _Code:
    langs: frozenset[str] | None
    origins: frozenset[str] | None
    path: re.Pattern[str] | None
    path_not: re.Pattern[str] | None
    fact: re.Pattern[str] | None
    fact_not: re.Pattern[str] | None
    text: re.Pattern[str] | None
    text_not: re.Pattern[str] | None

    def matches(self, block: CodeBlock) -> bool:
        if self.langs is not None and block.lang not in self.langs:
            return False
        if self.origins is not None and block.origin not in self.origins:
            return False
        if self.path is not None and not (block.path and self.path.search(block.path)):
            return False
        if self.path_not is not None and block.path and self.path_not.search(block.path):
            return False
        if self.fact is not None or self.fact_not is not None:
            facts = _joined(block.facts)
            if self.fact is not None and not self.fact.search(facts):
                return False
            if self.fact_not is not None and self.fact_not.search(facts):
                return False
        if self.text is not None and not self.text.search(block.text):
            return False
        return self.text_not is None or not self.text_not.search(block.text)


@dataclass(frozen=True)
class Rule:
    """A compiled rule: everything parsed and compiled once, at load."""

    id: str
    category: str
    description: str
    action: str
    tools: frozenset[str] | None
    programs: frozenset[str] | None
    source: re.Pattern[str] | None
    arg: re.Pattern[str] | None
    arg_not: re.Pattern[str] | None
    args: re.Pattern[str] | None
    args_not: re.Pattern[str] | None
    paths: re.Pattern[str] | None
    protected: bool
    path_not: re.Pattern[str] | None
    fact: re.Pattern[str] | None
    fact_not: re.Pattern[str] | None
    code: _Code | None

    @classmethod
    def compile(cls, spec: RuleSpec, where: str) -> Rule:
        m = spec.match
        loc = f"{where}: rule {spec.id}"
        paths, protected = _globs(m.paths)
        code = None
        if m.code is not None:
            c = m.code
            code_path, _ = _globs(c.path)
            code = _Code(
                frozenset(c.lang) if c.lang else None,
                frozenset(c.origin) if c.origin else None,
                code_path,
                _rx(c.path_not, loc),
                _fact_rx(c.fact, loc),
                _fact_rx(c.fact_not, loc),
                _rx(c.text, loc),
                _rx(c.text_not, loc),
            )
        return cls(
            id=spec.id,
            category=spec.category,
            description=spec.description,
            action=spec.action,
            tools=frozenset(m.tool) if m.tool else None,
            programs=frozenset(m.program) if m.program else None,
            source=_rx(m.source, loc),
            arg=_rx(m.arg, loc),
            arg_not=_rx(m.arg_not, loc),
            args=_rx(m.args, loc),
            args_not=_rx(m.args_not, loc),
            paths=paths,
            protected=protected,
            path_not=_rx(m.path_not, loc),
            fact=_fact_rx(m.fact, loc),
            fact_not=_fact_rx(m.fact_not, loc),
            code=code,
        )

    def needs_any(self, shape: _Shape) -> bool:
        """Cheap pre-filter on the call's shape: False when it lacks something this rule requires."""
        tool, facts, kinds, paths, commands = shape
        if self.tools is not None and tool not in self.tools:
            return False
        if self.fact is not None and not facts:
            return False
        if self.code is not None and not any(
            (self.code.langs is None or lang in self.code.langs)
            and (self.code.origins is None or origin in self.code.origins)
            for lang, origin in kinds
        ):
            return False
        if (self.paths is not None or self.protected) and not paths:
            return False
        return commands or (self.arg is None and self.args is None and self.source is None)

    def _command_ok(self, cmd: Command) -> bool:
        if self.source is not None and not self.source.search(cmd.source):
            return False
        args = cmd.argv[1:]
        if self.arg is not None:
            hit = False
            for a in args:
                if self.arg.search(a) and not (self.arg_not is not None and self.arg_not.search(a)):
                    hit = True
                    break
            if not hit:
                return False
        elif self.arg_not is not None and any(self.arg_not.search(a) for a in args):
            return False
        if self.args is not None or self.args_not is not None:
            joined = " ".join(args)
            if self.args is not None and not self.args.search(joined):
                return False
            if self.args_not is not None and self.args_not.search(joined):
                return False
        return True

    def _path_hit(self, paths: Iterable[str], protected: ProtectedPaths) -> str | None:
        for path in paths:
            if self.path_not is not None and self.path_not.search(path):
                continue
            if self.paths is not None and self.paths.search(path):
                return path
            if self.protected and protected.match(path):
                return path
        return None

    def evaluate(
        self, call: NormalizedCall, programs: set[str], protected: ProtectedPaths
    ) -> RuleMatch | None:
        if self.tools is not None and call.tool not in self.tools:
            return None
        if self.programs is not None and self.programs.isdisjoint(programs):
            return None
        command: Command | None = None
        if self.programs is not None:
            command = next(
                (c for c in call.commands if c.program in self.programs and self._command_ok(c)), None
            )
            if command is None:
                return None
        elif self.source is not None or self.arg is not None or self.args is not None:
            command = next((c for c in call.commands if self._command_ok(c)), None)
            if command is None:
                return None
        path: str | None = None
        if self.paths is not None or self.protected:
            path = self._path_hit(call.paths, protected)
            if path is None:
                return None
        if self.fact is not None or self.fact_not is not None:
            facts = _joined(call.facts)
            if self.fact is not None and not self.fact.search(facts):
                return None
            if self.fact_not is not None and self.fact_not.search(facts):
                return None
        if self.code is not None:
            block = next((b for b in call.blocks if self.code.matches(b)), None)
            if block is None:
                return None
            path = path or block.path
        return RuleMatch(self.id, self.category, self.action, self.description, command, path)


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


UNPARSEABLE_RULE_ID = "builtin.unparseable"
_PREFIX_ALT = re.compile(r"\^(?:([\w-]+)|\(((?:[\w-]+\|)*[\w-]+)\))(?::|\$|$)")


def _top_level_alternatives(pattern: str) -> list[str] | None:
    """``pattern`` split at its top-level ``|`` (None when its brackets cannot be followed)."""
    parts: list[str] = []
    depth = 0
    in_class = False
    start = 0
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            i += 2
            continue
        if in_class:
            in_class = ch != "]"
        elif ch == "[":
            in_class = True
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "|" and depth == 0:
            parts.append(pattern[start:i])
            start = i + 1
        i += 1
    if depth != 0 or in_class:
        return None
    parts.append(pattern[start:])
    return parts


def fact_prefixes(pattern: str | None) -> frozenset[str] | None:
    """The fact kinds (the part before ``:``) a fact regex can match, when every top-level
    alternative starts with ``^kind:`` or ``^(kind1|kind2):``; None when it cannot be told (then
    the rule is always checked)."""
    if pattern is None:
        return None
    alternatives = _top_level_alternatives(pattern)
    if not alternatives:
        return None
    kinds: set[str] = set()
    for alt in alternatives:
        m = _PREFIX_ALT.match(alt)
        if m is None:
            return None
        kinds.update((m.group(1) or m.group(2)).split("|"))
    return frozenset(kinds)


def _kinds(facts: Iterable[str]) -> set[str]:
    return {f.partition(":")[0] for f in facts}


def _gate_for(
    rules: Sequence[Rule], indices: Iterable[int], code: bool
) -> tuple[re.Pattern[str], frozenset[int]] | None:
    """One regex that matches wherever any of these rules' fact regexes matches (None: cannot
    combine, e.g. a user regex with global inline flags; then no gate, every rule is checked)."""
    chosen = list(indices)
    if not chosen:
        return None
    patterns = [(rules[i].code.fact if code else rules[i].fact) for i in chosen]  # type: ignore[union-attr]
    try:
        combined = re.compile("|".join(f"(?:{p.pattern})" for p in patterns if p is not None), re.MULTILINE)
    except re.error:
        return None
    return combined, frozenset(chosen)


class RuleEngine:
    """The built-in pack plus user rule files, compiled once; ``evaluate`` is one pass per call."""

    def __init__(self, rules: Sequence[Rule], protected_paths: Sequence[str]) -> None:
        seen: set[str] = set()
        for rule in rules:
            if rule.id in seen:
                raise RuleFileError(f"duplicate rule id {rule.id!r}")
            seen.add(rule.id)
        order = {id(r): i for i, r in enumerate(rules)}
        self.rules = tuple(sorted(rules, key=lambda r: (SEVERITY[r.action], order[id(r)])))
        # readings of calls seen before, by content hash, with this engine's match for each
        self.normalize_cache = NormalizeCache()
        self.protected = ProtectedPaths(protected_paths)
        # Index: rules naming programs are reached through the programs a call runs; the rest
        # are pre-filtered on what they need (facts, code, paths, commands) before any regex.
        self._by_program: dict[str, list[int]] = {}
        self._general: list[tuple[int, Rule]] = []
        self._call_fact_gate: tuple[re.Pattern[str], frozenset[int]] | None = None
        self._code_fact_gate: tuple[re.Pattern[str], frozenset[int]] | None = None
        self._general_for: dict[_Shape, tuple[int, ...]] = {}
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
        self._call_fact_gate = _gate_for(
            self.rules, (i for i, r in self._general if r.fact is not None), False
        )
        self._code_fact_gate = _gate_for(
            self.rules, (i for i, r in self._general if r.code is not None and r.code.fact is not None), True
        )

    @classmethod
    def load(
        cls,
        rule_files: Sequence[Path] = (),
        protected_paths: Sequence[str] = DEFAULT_PROTECTED_PATHS,
        include_builtin: bool = True,
    ) -> RuleEngine:
        """Compile the built-in pack (unless excluded) and ``rule_files``, in that order."""
        files = ([BUILTIN_PACK] if include_builtin else []) + [Path(p) for p in rule_files]
        rules = [rule for f in files for rule in _read_rule_file(f)]
        return cls(rules, protected_paths)

    @classmethod
    def from_settings(cls, settings: GuardSettings, extra_protected_paths: Sequence[str] = ()) -> RuleEngine:
        """The engine for one task: settings' rule files and protected paths plus the task's own."""
        return cls.load(settings.rule_files, [*settings.protected_paths, *extra_protected_paths])

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
        skip: set[int] = set()
        code_facts = [f for b in normalized.blocks for f in b.facts]
        call_kinds, code_kinds = _kinds(normalized.facts), _kinds(code_facts)
        skip.update(i for i, k in self._call_kinds.items() if k.isdisjoint(call_kinds))
        skip.update(i for i, k in self._code_kinds.items() if k.isdisjoint(code_kinds))
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
        if normalized is not entry.normalized:  # the episode added something: match afresh
            hit = self.match(normalized)
        elif entry.matched:
            hit = entry.match  # type: ignore[assignment]
        else:
            hit = self.match(normalized)
            entry.match, entry.matched = hit, True
        return RuleResult(normalized, hit, (time.perf_counter() - start) * 1e6)
