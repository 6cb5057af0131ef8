"""The benchmarks' child processes (gateways, policy servers, MCP servers): started so that they end
with the benchmark, a free loopback port to give one, and the wait until it answers, so a child that
dies or hangs at start is one clear error."""

from __future__ import annotations

import functools
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

import httpx

from rlguard.errors import RlguardError
from rlguard.loops.orphans import die_with_parent


def start_child(args: list[str], **popen: Any) -> subprocess.Popen[bytes]:
    """``subprocess.Popen`` of a server that gets SIGTERM when this process dies: a benchmark killed
    by a signal runs no ``finally``, and its gateway (with its sandboxes) and policy server would
    otherwise live on. Call it from the main thread (the kernel ties the signal to the thread)."""
    return subprocess.Popen(args, preexec_fn=functools.partial(die_with_parent, os.getpid()), **popen)


def start_gateway(port: int, env: dict[str, str], log: IO[bytes]) -> subprocess.Popen[bytes]:
    """``rlguard serve`` on loopback ``port`` as a benchmark's child, in its own session (so a fault
    run can kill its whole group), output to ``log``."""
    return start_child(
        [sys.executable, "-m", "rlguard", "serve", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def free_port() -> int:
    """A loopback port free at this moment (the child binds it next)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until_answers(
    proc: subprocess.Popen, health_url: str, what: str, log: Path, timeout_s: float = 180.0
) -> None:
    """Return once ``health_url`` answers 200. Raise when the child exits first or does not answer
    within ``timeout_s``; stopping it is the caller's (it knows how)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RlguardError(f"the {what} exited during start; see {log}")
        try:
            if httpx.get(health_url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RlguardError(f"the {what} did not start within {timeout_s:g} s; see {log}")
