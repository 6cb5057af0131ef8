"""``rlguard policy serve`` and ``rlguard serve`` (the gateway) in child processes on loopback ports.

Why processes: the loop's trainer and rollout workers are Python threads of one process; a policy
server or a gateway there shares their interpreter lock, so generation, tool calls and the
optimiser's Python work take turns instead of overlapping. Separate processes are also how vLLM or
SGLang and the gateway run in production; weights still arrive through the server's HTTP reload
endpoint (``trainer.reload``), and the gateway reads the same settings (environment) as this process.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import httpx

from gateway.core.auth import ensure_admin_token
from rlguard.errors import RlguardError
from rlguard.loops.local_gateway import LocalGateway
from rlguard.loops.orphans import die_with_parent
from rlguard.settings import Settings
from rollout.control import TOKEN_ENV, ReloadControl

ROOTS_ENV = "RLGUARD_ROLLOUT__POLICY__RELOAD_ROOTS"


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
    control: ReloadControl | None = None,
) -> Iterator[str]:
    """Yield ``http://host:port`` while a child ``rlguard policy serve --model MODEL`` answers.

    ``control`` (the run's token and checkpoint folder) reaches the child through its environment,
    never its argv (which every local user can read in ``/proc``)."""
    port = _free_port(host)
    command = [sys.executable, "-m", "rlguard", "policy", "serve", "--model", str(model),
               "--device", device, "--host", host, "--port", str(port)]  # fmt: skip
    env = {key: value for key, value in os.environ.items() if key not in (TOKEN_ENV, ROOTS_ENV)}
    if control is not None:
        env[TOKEN_ENV] = control.token
        env[ROOTS_ENV] = json.dumps([str(root) for root in control.roots])
    url = f"http://{host}:{port}"
    with _child(command, url, "/health", startup_timeout_s, "policy server", env=env):
        if version != "0" and control is not None:
            httpx.post(
                f"{url}/reload_weights",
                json={"path": str(model), "version": version},
                headers={"Authorization": f"Bearer {control.token}"},
                timeout=300,
            ).raise_for_status()
        yield url


@contextlib.contextmanager
def gateway_process(
    settings: Settings, host: str = "127.0.0.1", startup_timeout_s: float = 300.0
) -> Iterator[LocalGateway]:
    """Yield the gateway (URL and admin token) of a child ``rlguard serve`` on a loopback port.

    The child reads its settings from this process's environment, as ``settings`` was, but serves
    ``settings.gateway.suites`` (given as ``--suite``); the admin token is made (or read) here
    first, in the state directory both share.
    """
    token = ensure_admin_token(settings)
    port = _free_port(host)
    command = [sys.executable, "-m", "rlguard", "serve", "--host", host, "--port", str(port)]
    command += [arg for suite in settings.gateway.suites for arg in ("--suite", str(suite))]
    with _child(command, f"http://{host}:{port}", "/healthz", startup_timeout_s, "gateway", 60) as url:
        yield LocalGateway(url, token, settings)


@contextlib.contextmanager
def _child(
    command: list[str],
    url: str,
    health: str,
    startup_timeout_s: float,
    what: str,
    stop_timeout_s: float = 15,
    env: dict[str, str] | None = None,
) -> Iterator[str]:
    with tempfile.TemporaryFile() as log:  # a file, not a pipe: a chatty child never blocks on it
        process = subprocess.Popen(
            command,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log,
            preexec_fn=functools.partial(die_with_parent, os.getpid()),  # no orphan if we are killed
        )
        try:
            _wait_until_up(process, log, url + health, startup_timeout_s, what)
            yield url
        finally:
            process.terminate()  # graceful: the gateway shuts its sandboxes down
            try:
                process.wait(timeout=stop_timeout_s)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_until_up(
    process: subprocess.Popen[bytes], log: IO[bytes], health_url: str, timeout_s: float, what: str
) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        if process.poll() is not None:
            log.seek(0)
            error = log.read().decode(errors="replace")[-2000:]
            raise RlguardError(f"the {what} exited with {process.returncode}: {error}")
        try:
            if httpx.get(health_url, timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RlguardError(f"the {what} did not answer within {timeout_s:.0f} s")
        time.sleep(0.2)
