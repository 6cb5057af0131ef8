"""Normalisation: what a tool call really does, independent of how it is spelled.

``normalize(call)`` turns a ``ToolCall`` into a ``NormalizedCall``: the simple commands it runs
(after quoting, wrappers, nested shells and decoders are seen through), the paths it touches, the
code it runs or writes (with facts read from that code) and call-level facts (files written,
emptied, deleted). ``text`` is a canonical rendering: the judge caches by it and the store logs it.

A call that cannot be read statically (shell syntax error, over the size or nesting limits or
the work budget of ``guard.normalize.budget``, a non-string argument) gets ``parse_error`` set;
the rule engine escalates those, never allows them.
"""

from __future__ import annotations

import shlex
from collections import deque
from collections.abc import Iterator
from typing import Any

from guard.normalize.budget import Budget, Unparseable, budgeted
from guard.normalize.findings import Findings
from guard.normalize.forgery import expected_overwrites
from guard.normalize.shell import ShellWalker
from guard.paths import WORKSPACE, absolute
from guard.types import Effect, NormalizedCall, ToolCall

MAX_COMMAND_CHARS = 64 * 1024
MAX_CONTENT_CHARS = 1024 * 1024
MAX_TEXT_CHARS = 16 * 1024

_PATH_KEYS = ("path", "file_path", "filename", "file", "dir", "directory")
_OLD_KEYS = ("old_str", "old_string", "old", "search")
_NEW_KEYS = ("new_str", "new_string", "new", "replace", "replacement")
_CONTENT_KEYS = ("content", "contents", "text", "data", "file_text")


def _first(arguments: dict[str, Any], keys: tuple[str, ...]) -> Any:
    for key in keys:
        if key in arguments:
            return arguments[key]
    return None


def _string(value: Any, what: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise Unparseable(f"{what} is not a string")
    return value


def _bash(arguments: dict[str, Any], f: Findings) -> None:
    command = _string(arguments.get("command", arguments.get("cmd")), "command")
    if len(command) > MAX_COMMAND_CHARS:
        raise Unparseable(f"command over {MAX_COMMAND_CHARS} characters")
    ShellWalker(f, 0, "bash").run(command)


def _file_tool(tool: str, arguments: dict[str, Any], f: Findings) -> None:
    path = _string(_first(arguments, _PATH_KEYS), "path")
    if tool in ("read_file", "list_dir"):
        full = f.add_path(path or ".", WORKSPACE)
        f.effects.append(Effect("read" if tool == "read_file" else "list", full))
        return
    full = absolute(path or ".", WORKSPACE)
    if tool == "write_file":
        content = _string(_first(arguments, _CONTENT_KEYS), "content")
        if len(content) > MAX_CONTENT_CHARS:
            raise Unparseable(f"content over {MAX_CONTENT_CHARS} characters")
        f.note_write(full, content, WORKSPACE, 0)
        return
    old = _string(_first(arguments, _OLD_KEYS), "old text")
    new = _string(_first(arguments, _NEW_KEYS), "new text")
    if len(old) + len(new) > MAX_CONTENT_CHARS:
        raise Unparseable(f"edit over {MAX_CONTENT_CHARS} characters")
    f.note_edit(full, old, new, 0)


def _lines(tool: str, f: Findings, error: str | None) -> Iterator[str]:
    """The canonical text's lines: one per command, then writes/facts, code and paths."""
    yield f"tool: {tool}"
    for cmd in f.commands:
        prefix = "" if cmd.source == "bash" else f"[{cmd.source}] "
        yield f"$ {prefix}{shlex.join(cmd.argv)}"
    for fact in dict.fromkeys(f.facts):
        yield f"fact: {fact}"
    for block in f.blocks:
        where = f" {block.path}" if block.path else ""
        yield f"code[{block.lang},{block.origin}{where}]:"
        yield block.text
    for path in dict.fromkeys(f.paths):
        yield f"path: {path}"
    if error:
        yield f"unparseable: {error}"


def _render(tool: str, f: Findings, error: str | None) -> str:
    """The canonical text, head and tail kept within ``MAX_TEXT_CHARS``; the lines of a huge
    call are never all held at once (a thousand commands of 64 KiB words stay small here)."""
    half = MAX_TEXT_CHARS // 2
    head: list[str] = []
    size = 0
    tail: deque[str] = deque()
    tail_size = 0
    for line in _lines(tool, f, error):
        if size <= MAX_TEXT_CHARS:
            head.append(line[: MAX_TEXT_CHARS + 1])
            size += len(head[-1]) + 1
            continue
        tail.append(line[-half:])
        tail_size += len(tail[-1]) + 1
        while tail_size - len(tail[0]) - 1 >= half:
            tail_size -= len(tail.popleft()) + 1
    text = "\n".join([*head, *tail])
    if len(text) > MAX_TEXT_CHARS:
        text = text[:half] + "\n…\n" + text[-half:]
    return text


def normalize(call: ToolCall, budget: Budget | None = None) -> NormalizedCall:
    """What ``call`` does; never raises on bad input (an unreadable call carries ``parse_error``).

    ``budget`` bounds the work (a fresh default ``Budget`` when None): a call over it is
    unparseable, whatever its text asks the reading to compute."""
    f = Findings(ShellWalker)
    error: str | None = None
    arguments = call.arguments if isinstance(call.arguments, dict) else {}
    try:
        with budgeted(budget):
            if not isinstance(call.arguments, dict):
                raise Unparseable("arguments are not an object")
            if call.tool == "bash":
                _bash(arguments, f)
            elif call.tool in ("read_file", "list_dir", "write_file", "edit_file"):
                _file_tool(call.tool, arguments, f)
    except Unparseable as exc:
        error = str(exc)
    except RecursionError:
        error = "nested too deeply"
    except MemoryError:  # a backstop: the budgets are meant to stop any such text long before
        error = "over the memory budget"
    if error is None and f.effects:
        f.facts.extend(expected_overwrites(f.effects))
    return NormalizedCall(
        tool=call.tool,
        text=_render(call.tool, f, error),
        commands=tuple(f.commands),
        paths=tuple(dict.fromkeys(f.paths)),
        code=tuple(b.text for b in f.blocks),
        parse_error=error,
        facts=tuple(dict.fromkeys(f.facts)),
        blocks=tuple(f.blocks),
        files=tuple(f.files.items()),
        effects=tuple(dict.fromkeys(f.effects)),
    )


__all__ = ["normalize"]
