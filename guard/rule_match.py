"""A rule compiled for matching: its regexes and globs compiled once at load, its test against one
normalised call (``Rule.evaluate``), and the cheap pre-filters that skip it when the call lacks
what it needs (its shape, the literals its regexes require: ``guard.prefilter``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass

from guard.paths import ProtectedPaths
from guard.prefilter import may_match, required_literals
from guard.rule_spec import RuleFileError, RuleSpec
from guard.types import CodeBlock, Command, NormalizedCall, RuleMatch

PROTECTED = "@protected"  # the hidden paths (settings, the task's own): the older name of @hidden
HIDDEN = "@hidden"


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
def joined_facts(facts: tuple[str, ...]) -> str:
    """Facts as one string; cached because every rule of one call asks for the same join."""
    return "\n".join(facts)


def _globs(patterns: list[str] | None) -> tuple[re.Pattern[str] | None, bool]:
    if not patterns:
        return None, False
    protected = PROTECTED in patterns or HIDDEN in patterns
    plain = [glob_regex(p) for p in patterns if p not in (PROTECTED, HIDDEN)]
    return (re.compile("|".join(plain)) if plain else None), protected


# what a call offers rules: tool, has facts, (lang, origin) of its code blocks, has paths, has commands
Shape = tuple[str, bool, frozenset[tuple[str, str]], bool, bool]


Literals = tuple[frozenset[str], bool] | None


def _literals(regex: re.Pattern[str] | None) -> Literals:
    """What a text must contain for ``regex`` to match it (``guard.prefilter``)."""
    return required_literals(regex.pattern, regex.flags) if regex is not None else None


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
    fact_literals: Literals = None
    text_literals: Literals = None

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
            facts = joined_facts(block.facts)
            if self.fact is not None and not (
                may_match(self.fact_literals, facts) and self.fact.search(facts)
            ):
                return False
            if self.fact_not is not None and self.fact_not.search(facts):
                return False
        if self.text is not None and not (
            may_match(self.text_literals, block.text) and self.text.search(block.text)
        ):
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
    arg_literals: Literals = None
    args_literals: Literals = None
    fact_literals: Literals = None

    @classmethod
    def compile(cls, spec: RuleSpec, where: str) -> Rule:
        m = spec.match
        loc = f"{where}: rule {spec.id}"
        paths, protected = _globs(m.paths)
        code = None
        if m.code is not None:
            c = m.code
            code_path, _ = _globs(c.path)
            code_fact, code_text = _fact_rx(c.fact, loc), _rx(c.text, loc)
            code = _Code(
                frozenset(c.lang) if c.lang else None,
                frozenset(c.origin) if c.origin else None,
                code_path,
                _rx(c.path_not, loc),
                code_fact,
                _fact_rx(c.fact_not, loc),
                code_text,
                _rx(c.text_not, loc),
                _literals(code_fact),
                _literals(code_text),
            )
        arg, args, fact = _rx(m.arg, loc), _rx(m.args, loc), _fact_rx(m.fact, loc)
        return cls(
            id=spec.id,
            category=spec.category,
            description=spec.description,
            action=spec.action,
            tools=frozenset(m.tool) if m.tool else None,
            programs=frozenset(m.program) if m.program else None,
            source=_rx(m.source, loc),
            arg=arg,
            arg_not=_rx(m.arg_not, loc),
            args=args,
            args_not=_rx(m.args_not, loc),
            paths=paths,
            protected=protected,
            path_not=_rx(m.path_not, loc),
            fact=fact,
            fact_not=_fact_rx(m.fact_not, loc),
            code=code,
            arg_literals=_literals(arg),
            args_literals=_literals(args),
            fact_literals=_literals(fact),
        )

    def needs_any(self, shape: Shape) -> bool:
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
            literals = self.arg_literals
            for a in args:
                if (
                    may_match(literals, a)
                    and self.arg.search(a)
                    and not (self.arg_not is not None and self.arg_not.search(a))
                ):
                    hit = True
                    break
            if not hit:
                return False
        elif self.arg_not is not None and any(self.arg_not.search(a) for a in args):
            return False
        if self.args is not None or self.args_not is not None:
            joined = " ".join(args)
            if self.args is not None and not (
                may_match(self.args_literals, joined) and self.args.search(joined)
            ):
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
            facts = joined_facts(call.facts)
            if self.fact is not None and not (
                may_match(self.fact_literals, facts) and self.fact.search(facts)
            ):
                return None
            if self.fact_not is not None and self.fact_not.search(facts):
                return None
        if self.code is not None:
            block = next((b for b in call.blocks if self.code.matches(b)), None)
            if block is None:
                return None
            path = path or block.path
        return RuleMatch(self.id, self.category, self.action, self.description, command, path)
