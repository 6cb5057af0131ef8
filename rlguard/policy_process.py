"""``rlguard policy serve`` in a child process on a loopback port, for the loops.

Why a process: the loop's trainer, rollout workers and gateway are Python threads of one process;
a policy server there shares their interpreter lock, so generation and the optimiser's Python work
take turns instead of overlapping. A separate process is also how vLLM or SGLang serve in
production; weights still arrive through its HTTP reload endpoint (``trainer.reload``).
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import httpx

from rlguard.errors import RlguardError


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def policy_server_process(
    model: Path | str,
    device: str = "cpu",
    version: str = "0",
    host: str = "127.0.0.1",
    startup_timeout_s: float = 300.0,
) -> Iterator[str]:
    """Yield ``http://host:port`` while a child ``rlguard policy serve --model MODEL`` answers."""
    port = _free_port(host)
    command = [sys.executable, "-m", "rlguard", "policy", "serve", "--model", str(model),
               "--device", device, "--host", host, "--port", str(port)]  # fmt: skip
    with tempfile.TemporaryFile() as log:  # a file, not a pipe: a chatty child never blocks on it
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log)
        try:
            _wait_until_up(process, log, f"http://{host}:{port}", startup_timeout_s)
            if version != "0":
                body = {"path": str(model), "version": version}
                httpx.post(f"http://{host}:{port}/reload_weights", json=body, timeout=300)
            yield f"http://{host}:{port}"
        finally:
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_until_up(process: subprocess.Popen[bytes], log: IO[bytes], url: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        if process.poll() is not None:
            log.seek(0)
            error = log.read().decode(errors="replace")[-2000:]
            raise RlguardError(f"the policy server exited with {process.returncode}: {error}")
        try:
            if httpx.get(f"{url}/health", timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RlguardError(f"the policy server did not answer within {timeout_s:.0f} s")
        time.sleep(0.2)
