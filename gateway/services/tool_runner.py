"""Runs an allowed tool call in the episode's sandbox and shapes the one answer the agent sees.

File-tool wording (not found, written, edited) comes from ``contract.wording``, the same
functions the decoys use, so a real answer and a decoy cannot be told apart by their words.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from contract import wording
from contract.calls import (
    BashCall,
    EditFileCall,
    ListDirCall,
    ReadFileCall,
    SubmitCall,
    ToolAnswer,
    WriteFileCall,
)
from sandbox.base import DirEntry, EngineUnavailable, PathEscapeError, Sandbox, SandboxError
from sandbox.settings import SandboxLimits


@dataclass(frozen=True)
class ToolOutcome:
    """The answer the agent sees, and what the record adds: whether it timed out, how long it ran."""

    answer: ToolAnswer
    timed_out: bool
    exec_ms: float


def _decode(data: bytes, cap: int) -> tuple[str, bool]:
    truncated = len(data) > cap
    return data[:cap].decode("utf-8", errors="replace"), truncated


_NAME_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def escape_name(name: str) -> str:
    """A file name on one line, as ``ls -b`` shows it: a newline in a name cannot forge an entry,
    nor a control character rewrite the reader's terminal (backslash, ``\\n``, ``\\t``, ``\\r``,
    else ``\\ooo`` octal for C0, DEL and C1 controls)."""
    out = []
    for char in name:
        code = ord(char)
        if char in _NAME_ESCAPES:
            out.append(_NAME_ESCAPES[char])
        elif code < 0x20 or 0x7F <= code <= 0x9F:
            out.append(f"\\{code:03o}")
        else:
            out.append(char)
    return "".join(out)


def list_dir_output(entries: list[DirEntry]) -> str:
    """One entry per line, sorted, directories marked with a trailing ``/`` (like ``ls -p``), names
    escaped like ``ls -b`` (see :func:`escape_name`)."""
    return "\n".join(
        escape_name(e.name) + ("/" if e.kind == "dir" else "") for e in sorted(entries, key=lambda e: e.name)
    )


async def _read_text(sandbox: Sandbox, tool: str, path: str, cap: int) -> tuple[str, bool] | ToolAnswer:
    try:
        data = await sandbox.read_file(path, max_bytes=cap + 1)
    except (PathEscapeError, FileNotFoundError):
        return wording.file_not_found_answer(tool, path)
    return _decode(data, cap)


async def run_tool(
    sandbox: Sandbox,
    call: BashCall | ReadFileCall | WriteFileCall | EditFileCall | ListDirCall | SubmitCall,
    limits: SandboxLimits,
) -> ToolOutcome:
    """Execute ``call``; sandbox errors the agent caused become ordinary failed answers, not 5xx.
    An engine that stopped answering is no answer at all: ``EngineUnavailable`` goes up."""
    start = time.perf_counter()
    timed_out = False
    cap = limits.output_cap_bytes
    try:
        match call:
            case BashCall(arguments=args):
                timeout = min(args.timeout or limits.exec_timeout_s, limits.exec_timeout_s * 10)
                result = await sandbox.exec(args.command, timeout_s=timeout)
                answer = ToolAnswer(result.output, result.exit_code, result.truncated)
                timed_out = result.timed_out
            case ReadFileCall(arguments=args):
                text = await _read_text(sandbox, "read_file", args.path, cap)
                answer = text if isinstance(text, ToolAnswer) else ToolAnswer(text[0], 0, text[1])
            case WriteFileCall(arguments=args):
                await sandbox.write_file(args.path, args.content.encode("utf-8"))
                answer = wording.write_success_answer(args.path, args.content)
            case EditFileCall(arguments=args):
                answer = await _edit(sandbox, args.path, args.old_str, args.new_str, limits)
            case ListDirCall(arguments=args):
                entries = await sandbox.list_dir(args.path)
                answer = ToolAnswer(list_dir_output(entries), 0, False)
            case SubmitCall():
                answer = ToolAnswer(wording.SUBMIT_MESSAGE, 0, False)
    except (PathEscapeError, FileNotFoundError):  # an escape looks exactly like a missing file
        answer = wording.file_not_found_answer(call.tool, getattr(call.arguments, "path", "."))
    except EngineUnavailable:
        raise  # the engine died under the call: not an answer, the episode ends as infra_error
    except (SandboxError, TimeoutError) as exc:
        answer = ToolAnswer(f"{call.tool}: {exc or 'timed out'}", 1, False)
    exec_ms = (time.perf_counter() - start) * 1000
    return ToolOutcome(answer=answer, timed_out=timed_out, exec_ms=exec_ms)


async def _edit(sandbox: Sandbox, path: str, old: str, new: str, limits: SandboxLimits) -> ToolAnswer:
    """Exact replace of one occurrence; zero or several matches are the agent's error to fix."""
    text = await _read_text(sandbox, "edit_file", path, limits.fsize_bytes)
    if isinstance(text, ToolAnswer):
        return text
    content, _ = text
    count = content.count(old)
    if count != 1:
        return wording.edit_mismatch_answer(path, count)
    await sandbox.write_file(path, content.replace(old, new, 1).encode("utf-8"))
    return wording.edit_success_answer(path)
