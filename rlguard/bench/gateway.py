"""``rlguard bench gateway``: a tool call's round trip through HTTP + guard + store + sandbox.

The gateway runs as a real ``rlguard serve`` subprocess (SQLite, local Docker engine) so the load
generator does not share its interpreter. Reported beside it, in the same run and on the same
sandbox container, is the raw ``docker exec`` of the same command: the cost a gateway built on
``docker exec`` would start from.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import uvloop

from rlguard.bench.children import free_port, start_gateway, wait_until_answers
from rlguard.errors import RlguardError

TASK = "builtin/matrix-transpose"
COMMAND = "echo hi"
EPISODES = 16


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


class GatewayUnderTest:
    """A gateway served by ``rlguard serve`` in a child process on a free loopback port (for benchmarks)."""

    def __init__(self, state: Path, extra_env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.token = secrets.token_urlsafe(32)
        self.instance = f"bench-{secrets.token_hex(4)}"
        env = {
            **os.environ,
            "RLGUARD_STATE_DIR": str(state),
            "RLGUARD_DATABASE_URL": f"sqlite:///{state / 'bench.db'}",
            "RLGUARD_ADMIN_TOKEN": self.token,
            "RLGUARD_INSTANCE": self.instance,
            "RLGUARD_SANDBOX__WARM_POOL_SIZE": "4",
            **(extra_env or {}),
        }
        self.log = (state / "gateway.log").open("wb")
        self.proc = start_gateway(self.port, env, self.log)
        try:
            wait_until_answers(self.proc, f"{self.url}/healthz", "gateway", state / "gateway.log")
        except RlguardError:
            self.stop()
            raise

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.log.close()


def _create_episode(client: httpx.Client) -> tuple[str, str]:
    response = client.post("/v1/episodes", json={"task": TASK, "policy_version": "bench"})
    if response.status_code != 200:
        raise RlguardError(f"could not create an episode: {response.status_code} {response.text[:300]}")
    body = response.json()
    return body["episode_id"], body["agent_token"]


def _sequential_ms(url: str, episode_id: str, token: str, calls: int) -> list[float]:
    body = {"tool": "bash", "arguments": {"command": COMMAND}}
    times = []
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as client:
        for i in range(calls + 5):
            started = time.perf_counter()
            response = client.post(f"/v1/episodes/{episode_id}/calls", json=body)
            elapsed = (time.perf_counter() - started) * 1000
            if response.status_code != 200 or response.json()["output"] != "hi\n":
                raise RlguardError(f"unexpected answer: {response.status_code} {response.text[:200]}")
            if i >= 5:  # warm-up: connection, first guard/JIT paths
                times.append(elapsed)
    return times


def _docker_exec_ms(container_id: str, runs: int) -> list[float]:
    docker = shutil.which("docker")
    if docker is None:
        raise RlguardError("the docker CLI is needed for the docker exec baseline")
    times = []
    for i in range(runs + 2):
        started = time.perf_counter()
        result = subprocess.run(
            [docker, "exec", "-u", "1000", "-w", "/workspace", container_id, "bash", "-c", COMMAND],
            capture_output=True,
            text=True,
            timeout=60,
        )
        elapsed = (time.perf_counter() - started) * 1000
        if result.stdout != "hi\n":
            raise RlguardError(f"docker exec failed: {result.stderr.strip()}")
        if i >= 2:
            times.append(elapsed)
    return times


async def _concurrent_calls_per_s(url: str, episodes: list[tuple[str, str]], calls_each: int) -> float:
    body = {"tool": "bash", "arguments": {"command": COMMAND}}
    limits = httpx.Limits(max_connections=len(episodes), max_keepalive_connections=len(episodes))
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:

        async def run(episode_id: str, token: str, n: int) -> None:
            headers = {"Authorization": f"Bearer {token}"}
            for _ in range(n):
                response = await client.post(f"/v1/episodes/{episode_id}/calls", json=body, headers=headers)
                if response.status_code != 200:
                    raise RlguardError(f"call failed: {response.status_code} {response.text[:200]}")

        await asyncio.gather(*(run(e, t, 2) for e, t in episodes))  # warm-up: connections
        started = time.perf_counter()
        await asyncio.gather(*(run(e, t, calls_each) for e, t in episodes))
        elapsed = time.perf_counter() - started
    return len(episodes) * calls_each / elapsed


def run_bench(calls: int = 300, concurrent_calls: int = 40) -> dict[str, Any]:
    """Measure and return the benchmark keys (see the module docstring)."""
    with tempfile.TemporaryDirectory(prefix="rlguard-bench-") as tmp:
        server = GatewayUnderTest(Path(tmp))
        try:
            with httpx.Client(
                base_url=server.url, headers={"Authorization": f"Bearer {server.token}"}, timeout=120
            ) as admin:
                episode_id, token = _create_episode(admin)
                sandbox_id = admin.get(f"/v1/episodes/{episode_id}").json()["sandbox_id"]
                call_ms = _sequential_ms(server.url, episode_id, token, calls)
                docker_ms = _docker_exec_ms(sandbox_id, max(20, calls // 10))
                episodes = [(episode_id, token)] + [_create_episode(admin) for _ in range(EPISODES - 1)]
                # the load generator shares the machine: give it the cheaper event loop too
                calls_per_s = uvloop.run(_concurrent_calls_per_s(server.url, episodes, concurrent_calls))
        finally:
            server.stop()
    call_p50 = statistics.median(call_ms)
    docker_p50 = statistics.median(docker_ms)
    return {
        "call_ms_p50": round(call_p50, 3),
        "call_ms_p99": round(_percentile(call_ms, 0.99), 3),
        "docker_exec_ms_p50": round(docker_p50, 3),
        "call_vs_docker_exec": round(call_p50 / docker_p50, 4),
        "calls_per_s_16": round(calls_per_s, 1),
        "calls_measured": len(call_ms),
    }
