"""The host's half of the in-sandbox runner: the program a container starts, one request and its
answer, and the checks every answer passes.

The runner (``sandbox/inside/``, standard library only) goes to the container as one program in the
environment of its ``docker exec``, its modules installed under their own names. It runs as the
agent's uid, which can kill it, stop it or write to its stdout's pipe, so nothing it says is
trusted: each request carries a random id the answer must echo, answers are size-capped by the
caller and validated field by field here, and data comes back re-capped. Kept apart from
``DockerSandbox`` so the wire rules can be read in one place.
"""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
from pathlib import Path
from typing import Any

from sandbox.attach import AttachedExec, ChannelClosed
from sandbox.base import DirEntry, ExecResult, PathEscapeError, SandboxError

_INSIDE = Path(__file__).resolve().parent / "inside"
#: The runner's modules (``sandbox/inside/``), each after those it imports; ``executor`` serves.
RUNNER_MODULES = ("protocol", "capture", "processes", "commands", "files", "archives", "executor")
# Installs one module in ``sys.modules`` under its name here, so the modules import each other
# inside the container exactly as on the host, with no file of them anywhere the agent could swap.
_INSTALL = """\
import sys
def _install(name, source):
    module = sys.modules[name] = type(sys)(name)
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, module)
    exec(compile(source, name, "exec"), module.__dict__)
_install("sandbox", "")
_install("sandbox.inside", "")
"""


def runner_program() -> str:
    """The runner as one program for ``python3 -I -S -c``: every module of ``sandbox/inside/``
    installed under its own name, then ``executor.main()``."""
    parts = [_INSTALL]
    for name in RUNNER_MODULES:
        source = (_INSIDE / f"{name}.py").read_text()
        parts.append(f"_install({f'sandbox.inside.{name}'!r}, {source!r})\n")
    parts.append('sys.modules["sandbox.inside.executor"].main()\n')
    return "".join(parts)


#: Passed in the environment of the runner's ``docker exec``; ``RUNNER_BOOT`` runs it.
RUNNER_PROGRAM = runner_program()
RUNNER_BOOT = "import os;exec(compile(os.environ.pop('RLGUARD_RUNNER'),'rlguard-exec','exec'))"
# ``exec -a`` renames the interpreter so ``pkill -f python`` in an episode does not hit the runner.
RUNNER_LAUNCHERS = (
    ["/bin/bash", "-c", 'exec -a rlguard-exec python3 -I -S -c "$0"', RUNNER_BOOT],
    ["python3", "-I", "-S", "-c", RUNNER_BOOT],
)


async def roundtrip(runner: AttachedExec, request: dict, timeout: float, max_line: int) -> dict:
    """Send one request and read its answer, which must be a JSON object echoing the request's id."""
    # A random id per request: a process in the sandbox cannot forge an answer blindly, and a
    # stray or injected line desynchronises nothing: it just breaks the channel.
    request_id = secrets.token_hex(8)
    await runner.send(json.dumps({**request, "id": request_id}).encode() + b"\n")
    line = await asyncio.wait_for(runner.read_line(max_line), timeout)
    try:
        reply = json.loads(line)
    except ValueError as exc:
        raise ChannelClosed("sandbox runner sent invalid JSON") from exc
    if not isinstance(reply, dict) or reply.get("id") != request_id or not isinstance(reply.get("ok"), bool):
        raise ChannelClosed("sandbox runner sent an answer of the wrong shape")
    return reply


def refusal(reply: dict) -> Exception:
    """The error for a request the runner refused (``ok`` false), by the kind it names."""
    kind, message = reply.get("kind"), str(reply.get("message", "refused"))[:2000]
    if kind == "path_escape":
        return PathEscapeError(message)
    if kind == "not_found":
        return FileNotFoundError(message)
    return SandboxError(message)


def decode_data(value: Any, limit: int) -> bytes:
    """The bytes of an answer's base64 ``data``, refused when malformed or over ``limit``."""
    if not isinstance(value, str):
        raise SandboxError("sandbox runner sent malformed data")
    try:
        data = base64.b64decode(value, validate=True)
    except ValueError as exc:
        raise SandboxError("sandbox runner sent malformed data") from exc
    if len(data) > limit:
        raise SandboxError("sandbox runner sent more data than allowed")
    return data


def exec_result(reply: dict, cap: int) -> ExecResult:
    """Validate an untrusted exec answer into an ExecResult (the output is re-capped here)."""
    output, exit_code = reply.get("output"), reply.get("exit_code")
    if not isinstance(output, str) or not isinstance(exit_code, int) or isinstance(exit_code, bool):
        raise SandboxError("sandbox runner sent a malformed exec answer")
    truncated = reply.get("truncated") is True
    if len(output) > cap + 512:
        output, truncated = output[: cap // 2] + "\n[... truncated ...]\n" + output[-cap // 2 :], True
    duration = reply.get("duration_ms")
    return ExecResult(
        output=output,
        exit_code=max(-1, min(exit_code, 255)),
        truncated=truncated,
        timed_out=reply.get("timed_out") is True,
        duration_ms=float(duration) if isinstance(duration, int | float) else 0.0,
    )


def dir_entries(reply: dict) -> list[DirEntry]:
    """Validate an untrusted listing answer into DirEntry values."""
    entries = reply.get("entries")
    if not isinstance(entries, list):
        raise SandboxError("sandbox runner sent a malformed listing")
    result = []
    for entry in entries:
        if not (
            isinstance(entry, list)
            and len(entry) == 3
            and isinstance(entry[0], str)
            and isinstance(entry[2], int)
        ):
            raise SandboxError("sandbox runner sent a malformed listing")
        kind = entry[1] if entry[1] in ("file", "dir", "symlink", "other") else "other"
        result.append(DirEntry(name=entry[0], kind=kind, size=int(entry[2])))
    return result
