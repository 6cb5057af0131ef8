"""A decoyed bash call runs for real, with only its intercepted commands replaced by stubs.

Why: an answer invented for a whole command line differs from bash's in everything around the
offending command (``cat /hidden/x; echo MARK`` must still print MARK; ``|| echo fallback``, ``| wc
-l``, ``2>/dev/null``, ``; exit 0`` must act as in bash; ``$$`` and the kernel's last pid must
advance as they do for a real command). So the gateway runs the agent's own line in the sandbox,
where each intercepted top-level simple command is replaced by a stub on the same line that prints
that command's decoy (on stderr when it fails, stdout when it succeeds) and ends with its exit
status, forking once as a real program would. The rest of the line runs as bash runs it.

A stub asks the sandbox itself what a probe used to ask separately: ``command -v PROG`` decides
between the decoy and bash's own ``command not found`` for a program the image may lack, and a
history command is replaced by its narrowed twin (``git log --all`` -> ``git log HEAD``), run for
real; in a neutral repository (``guard.repo``) a local git command is its own twin. No extra command
runs in the sandbox for a decoy, so a process watching it sees nothing but the call's own line
running.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from tree_sitter import Node

from guard.decoys.git import twin_for
from guard.decoys.shell import SHELL, SHELL_LINE_1
from guard.normalize.budget import Unparseable
from guard.normalize.shell_syntax import parse_source
from guard.types import Category, Command, RuleResult, ToolAnswer, ToolCall

_SHELLS = frozenset({"bash", "sh", "dash", "zsh", "ksh"})

MAX_EVALUATIONS = 256  # commands read one by one to find every intercepted one; beyond: whole line


class SpliceError(Exception):
    """Intercepted commands were found but the line could not be rewritten around them."""


Evaluate = Callable[[ToolCall], RuleResult]
DecoyFor = Callable[[ToolCall, RuleResult, ToolAnswer | None], ToolAnswer]


@dataclass(frozen=True)
class Stub:
    """What stands in for one top-level simple command."""

    answer: ToolAnswer  # printed, then the exit status
    command: Command  # the intercepted command (possibly nested inside the top-level one)
    check_installed: bool = False  # decoy only when ``command -v PROG`` finds the program
    twin: str | None = None  # a harmless command line run for real instead (history commands)
    outer: Command | None = None  # the top-level command the intercepted one was found in
    # the same place reached with other arguments (a loop over several paths): arguments -> answer
    variants: tuple[tuple[str, ToolAnswer], ...] = ()
    # protected paths the command names; when none of them exists in the sandbox at run time, the
    # command itself runs (the sandbox then answers as it would for any missing path: every view
    # agrees), else the decoy speaks. Empty: always the decoy.
    if_absent: tuple[str, ...] = ()


def ansi_c(text: str) -> str:
    """``text`` as one ``$'...'`` word on one line (newlines and controls escaped in octal)."""
    out = []
    for ch in text:
        if ch in "\\'":
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\{ord(ch):03o}")
        else:
            out.append(ch)
    return "$'" + "".join(out) + "'"


def _in_subshell(node: Node) -> bool:
    """Whether bash already forks for this command (a pipeline element, ``$(cmd)`` alone)."""
    parent = node.parent
    while parent is not None and parent.type == "redirected_statement":
        node, parent = parent, parent.parent
    if parent is None:
        return False
    if parent.type == "pipeline":
        return True
    return parent.type in ("command_substitution", "process_substitution") and parent.named_child_count == 1


def _last_statement(node: Node) -> bool:
    """Whether the command is the line's last statement: bash then execs the program in its own
    process without forking, so the stub exits the shell itself instead of forking."""
    while node.parent is not None and node.parent.type == "redirected_statement":
        node = node.parent
    parent = node.parent
    if parent is None or parent.type != "program":
        return False
    statements = [c for c in parent.named_children if c.type != "comment"]
    return bool(statements) and statements[-1].id == node.id


def _print(answer: ToolAnswer, line: int, top_level: bool) -> str:
    text = answer.output
    if top_level and SHELL_LINE_1 in text:  # bash names the line the command is on
        text = text.replace(SHELL_LINE_1, f"{SHELL}: line {line}: ")
    if not text:
        return ""
    return f"printf %s {ansi_c(text)}{' >&2' if answer.exit_code != 0 else ''}; "


def _words_text(node: Node) -> str:
    """The command's words as written (no assignments, no redirects), for ``set --``."""
    words = [
        c for c in node.named_children if c.type != "variable_assignment" and not c.type.endswith("redirect")
    ]
    return " ".join((w.text or b"").decode("utf-8", "replace") for w in words)


def stub_text(stub: Stub, node: Node, program_word: str) -> str:
    """One line of shell that behaves as the intercepted command would, for ``node``'s place.

    With variants (the place runs with several argument lists, as in a loop) the stub expands the
    command's own words in a subshell (``set --``: one fork, as the real program's) and answers
    for the arguments it finds; unknown ones get the first answer."""
    line = node.start_point.row + 1
    top_level = stub.command.source == "bash"
    if stub.twin is not None:
        return f"{{ {stub.twin}; }}"
    if stub.if_absent:
        decoy = stub_text(replace(stub, if_absent=()), node, program_word)
        exists = " || ".join(f"[ -e {shlex.quote(p)} ] || [ -L {shlex.quote(p)} ]" for p in stub.if_absent)
        original = (node.text or b"").decode("utf-8", "surrogatepass")
        return f"{{ if {exists}; then {decoy}; else {original}; fi; }}"
    if stub.variants:
        arms = [
            f"{shlex.quote(key)}) {_print(answer, line, top_level)}exit {answer.exit_code};;"
            for key, answer in (*stub.variants, ("*", stub.answer))
        ]
        arms[-1] = arms[-1].replace("'*')", "*)", 1)
        body = f'( set -- {_words_text(node)}; case "${{*:2}}" in {" ".join(arms)} esac )'
    else:
        status = stub.answer.exit_code
        end = f"exit {status}" if _in_subshell(node) or _last_statement(node) else f"(exit {status})"
        body = f"{_print(stub.answer, line, top_level)}{end}"
    if stub.check_installed:
        program = stub.command.program
        if top_level:
            missing = program_word
        elif stub.outer is not None and stub.outer.program in _SHELLS:
            missing = f"{shlex.quote(stub.outer.program)} -c {shlex.quote(program)}"
        else:
            missing = shlex.quote(program)
        return f"{{ if command -v {shlex.quote(program)} >/dev/null 2>&1; then {body}; else {missing}; fi; }}"
    return f"{{ {body}; }}"


def _commands_by_span(result: RuleResult) -> dict[tuple[int, int], list[Command]]:
    groups: dict[tuple[int, int], list[Command]] = {}
    for command in result.normalized.commands:
        if command.span is not None:
            groups.setdefault(command.span, []).append(command)
    return groups


def intercepted(
    result: RuleResult,
    culprit: Command | None,
    evaluate: Evaluate,
    skip: Callable[[RuleResult], bool],
) -> dict[tuple[int, int], list[tuple[Command, RuleResult]]]:
    """The top-level commands to replace: every one holding a command the rules intercept on
    its own (``skip`` exempts some, e.g. writes of tests grading restores), and the culprit's;
    for each, the intercepted commands found there, decoy rules' hits first."""
    chosen: dict[tuple[int, int], list[tuple[Command, RuleResult]]] = {}
    groups = _commands_by_span(result)
    if sum(map(len, groups.values())) > MAX_EVALUATIONS:
        raise SpliceError("too many commands to read one by one")
    for span, commands in groups.items():
        picks: list[tuple[int, Command, RuleResult]] = []
        for command in commands:
            alone = evaluate(ToolCall("bash", {"command": shlex.join(command.argv)}))
            match = alone.match
            # read alone, a command can only look unreadable (``sh`` fed by a pipe): not a reason
            if match is None or match.category == Category.UNPARSEABLE.value or skip(alone):
                continue
            if match.action in ("decoy", "escalate"):
                picks.append((0 if match.action == "decoy" else 1, command, alone))
        if picks:
            picks.sort(key=lambda pick: pick[0])
            chosen[span] = [(command, alone) for _, command, alone in picks]
    if culprit is not None and not chosen and not skip(result):
        # nothing intercepted on its own: the whole call's culprit stands in (the caller checks
        # that what is left of the line is harmless); with picks, a guessed culprit (the last
        # command) would only stub an innocent one
        if culprit.span is None:
            raise SpliceError("the intercepted command has no place on the line")
        chosen[culprit.span] = [(culprit, result)]
    return chosen


def splice(script: str, stubs: dict[tuple[int, int], Stub], blank: bool = False) -> str:
    """``script`` with each stubbed top-level simple command replaced; ``SpliceError`` when it
    cannot be parsed again or a span is not found (the caller then stubs the whole line).
    ``blank`` puts ``:`` in the stubs' places: what is left is all that runs for real."""
    try:
        root, text = parse_source(script)
    except Unparseable as exc:
        raise SpliceError(str(exc)) from exc
    data = text.encode("utf-8", "surrogatepass")
    found: dict[tuple[int, int], Node] = {}
    stack = [root]
    while stack:
        node = stack.pop()
        span = (node.start_byte, node.end_byte)
        if node.type == "command" and span in stubs and span not in found:
            found[span] = node
        stack.extend(node.children)
    if set(found) != set(stubs):
        raise SpliceError("an intercepted command was not found again")
    pieces: list[bytes] = []
    cursor = 0
    for span in sorted(found):
        node = found[span]
        stub = stubs[span]
        name = node.child_by_field_name("name")
        word = (name.text or b"").decode("utf-8", "replace") if name is not None else stub.command.program
        start, end = span
        redirects = [c for c in node.named_children if c.type.endswith("redirect")]
        parent = node.parent
        if parent is not None and parent.type == "redirected_statement" and _has_trailing_words(parent):
            # ``cat a 2>/dev/null b``: ``b`` hangs on the redirect; it is the command's, so the
            # whole statement is replaced and each redirect kept up to its first destination
            start, end = parent.start_byte, parent.end_byte
            redirects = [c for c in parent.named_children if c.type.endswith("redirect")]
        replacement = ":" if blank else stub_text(stub, node, word)
        if redirects:
            replacement += " " + " ".join(_redirect_text(r, data) for r in redirects)
        if start < cursor:
            raise SpliceError("overlapping commands")
        pieces.append(data[cursor:start])
        pieces.append(replacement.encode("utf-8", "surrogatepass"))
        cursor = end
    pieces.append(data[cursor:])
    spliced = b"".join(pieces).decode("utf-8", "surrogatepass")
    try:  # odd spellings (``cmd 2>f arg``: tree-sitter hangs ``arg`` on the redirect) may not
        parse_source(spliced)  # survive the replacement: never hand bash a broken line
    except Unparseable as exc:
        raise SpliceError(f"the stubbed line does not parse: {exc}") from exc
    return spliced


def _has_trailing_words(statement: Node) -> bool:
    return any(
        len(r.children_by_field_name("destination")) > 1
        for r in statement.named_children
        if r.type == "file_redirect"
    )


def _redirect_text(redirect: Node, data: bytes) -> str:
    """A redirect as written, without words tree-sitter hung on it after its destination."""
    destinations = redirect.children_by_field_name("destination") if redirect.type == "file_redirect" else []
    end = destinations[0].end_byte if destinations else redirect.end_byte
    return data[redirect.start_byte : end].decode("utf-8", "surrogatepass")


def whole_line(answer: ToolAnswer) -> str:
    """A line that prints ``answer`` and ends with its status, for a call with nothing to keep
    (over budget, not readable statically)."""
    text = answer.output
    printed = f"printf %s {ansi_c(text)}{' >&2' if answer.exit_code != 0 else ''}; " if text else ""
    return f"{printed}exit {answer.exit_code}"


def _answer(
    command: Command, alone: RuleResult, whole: RuleResult, decoy_for: DecoyFor, probe: ToolAnswer | None
) -> ToolAnswer:
    """The decoy of one intercepted command: from its own rule hit, else the whole call's."""
    call = ToolCall("bash", {"command": shlex.join(command.argv)})
    return decoy_for(call, alone if alone.match is not None else whole, probe)


def rewrite(
    script: str,
    result: RuleResult,
    culprit: Command | None,
    evaluate: Evaluate,
    decoy_for: DecoyFor,
    maybe_absent: Sequence[str] | frozenset[str],
    skip: Callable[[RuleResult], bool] = lambda _r: False,
) -> tuple[str, str] | None:
    """The command line to run instead of ``script`` (intercepted commands stubbed, the rest
    kept) and its skeleton (the stubs blanked: what runs for real, for the caller to check).
    None when nothing is to be stubbed (everything intercepted was exempted by ``skip``);
    ``SpliceError`` when the line cannot be rewritten (the caller stubs the whole line)."""
    chosen = intercepted(result, culprit, evaluate, skip)
    if not chosen:
        return None
    groups = _commands_by_span(result)
    stubs: dict[tuple[int, int], Stub] = {}
    for span, picks in chosen.items():
        command, alone = picks[0]
        neutral = "git_repo_neutral" in (alone if alone.match is not None else result).normalized.facts
        twin = twin_for(command, neutral) if command.program == "git" else None
        outer = groups[span][0] if groups.get(span) else None
        if twin is not None:
            stubs[span] = Stub(ToolAnswer("", 0), command, twin=twin, outer=outer)
            continue
        check = command.program in maybe_absent
        present = ToolAnswer(f"/usr/bin/{command.program}\n", 0) if check else None

        first = _answer(command, alone, result, decoy_for, present)
        absent = _runs_if_absent(command, alone if alone.match is not None else result, evaluate)
        variants: dict[str, ToolAnswer] = {}
        if command.source == "bash":  # the place's own words are the command's: answer per value
            for other, other_result in picks:
                key = " ".join(other.argv[1:])
                if other.program == command.program and other.source == "bash" and key not in variants:
                    variants[key] = _answer(other, other_result, result, decoy_for, present)
        stubs[span] = Stub(
            first,
            command,
            check_installed=check,
            outer=outer,
            variants=tuple(variants.items()) if len(variants) > 1 else (),
            if_absent=absent if not variants or len(variants) <= 1 else (),
        )
    return splice(script, stubs), splice(script, stubs, blank=True)


ABSENT_STAND_IN = "/nonexistent/rlguard-absent"


def _runs_if_absent(command: Command, hit: RuleResult, evaluate: Evaluate) -> tuple[str, ...]:
    """The protected path whose absence lets ``command`` run for real, or ``()``.

    Only when the path is the rules' whole objection: the same command with the path replaced by
    one that names nothing protected is allowed (or only flagged). Then, in a sandbox where the
    path does not exist, running the command itself reveals nothing and answers exactly as every
    other view of the sandbox does (``test``, ``find``, globbing, ``os.scandir``)."""
    match = hit.match
    if match is None or not match.path or not match.path.startswith("/") or command.source != "bash":
        return ()
    if not any(match.path in a for a in command.argv):  # named literally, absolute: else decoy
        return ()
    stand_in = [a.replace(match.path, ABSENT_STAND_IN) for a in command.argv]
    if stand_in == list(command.argv):
        return ()
    again = evaluate(ToolCall("bash", {"command": shlex.join(stand_in)}))
    if again.match is not None and again.match.action != "flag":
        return ()
    return (match.path,)
