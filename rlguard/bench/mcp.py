"""``rlguard bench mcp``: one tool call through the MCP server beside the same call through the HTTP API.

A real gateway runs as an ``rlguard serve`` subprocess (as in ``rlguard bench gateway``); the MCP
server runs as ``rlguard mcp serve --gateway URL`` subprocesses, one over stdio and one over
streamable HTTP, driven by the ``mcp`` SDK's own client. The three paths take turns call by call
(HTTP, MCP stdio, MCP HTTP, HTTP, ...), each in its own episode of the same task, so load on a
shared machine falls on all three alike. The target is ``mcp_vs_http <= 1.5``.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
from mcp import Client, StdioServerParameters

from rlguard.bench.children import free_port, start_child
from rlguard.bench.gateway import COMMAND, TASK, GatewayUnderTest
from rlguard.errors import RlguardError

WARMUP = 5


def _serve_args(url: str, *extra: str) -> list[str]:
    return ["-m", "rlguard", "mcp", "serve", "--gateway-url", url, "--task", TASK.split("/", 1)[1],
            "--policy-version", "bench-mcp", *extra]  # fmt: skip


def _start_http_mcp(url: str, env: dict[str, str], log: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    with log.open("wb") as out:
        proc = start_child(
            [sys.executable, *_serve_args(url, "--transport", "http", "--port", str(port))],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None:
            raise RlguardError(f"rlguard mcp serve --transport http exited; see {log}")
        try:
            httpx.get(f"http://127.0.0.1:{port}/mcp", timeout=1)
            return proc, f"http://127.0.0.1:{port}/mcp"
        except httpx.TransportError:
            if time.monotonic() > deadline:
                proc.kill()
                raise RlguardError("rlguard mcp serve --transport http did not start within 60 s") from None
            time.sleep(0.1)


def _mcp_text(result: Any) -> str:
    if result.is_error or not result.content or result.content[0].type != "text":
        raise RlguardError(f"unexpected MCP answer: {result}")
    return result.content[0].text


async def _measure(
    server: GatewayUnderTest, mcp_http_url: str, env: dict[str, str], calls: int
) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"http": [], "mcp_stdio": [], "mcp_http": []}
    admin = {"Authorization": f"Bearer {server.token}"}
    body = {"tool": "bash", "arguments": {"command": COMMAND}}
    stdio = StdioServerParameters(command=sys.executable, args=_serve_args(server.url), env=env)
    async with (
        httpx.AsyncClient(base_url=server.url, timeout=60) as http,
        Client(stdio, read_timeout_seconds=60) as mcp_stdio,
        Client(mcp_http_url, read_timeout_seconds=60) as mcp_http,
    ):
        created = await http.post(
            "/v1/episodes", json={"task": TASK, "policy_version": "bench-mcp"}, headers=admin
        )
        if created.status_code != 200:
            raise RlguardError(f"could not create an episode: {created.status_code} {created.text[:300]}")
        episode = created.json()
        path = f"/v1/episodes/{episode['episode_id']}/calls"
        agent = {"Authorization": f"Bearer {episode['agent_token']}"}

        async def via_http() -> str:
            response = await http.post(path, json=body, headers=agent)
            if response.status_code != 200:
                raise RlguardError(f"HTTP call failed: {response.status_code} {response.text[:200]}")
            return response.json()["output"]

        async def via(client: Client) -> str:
            return _mcp_text(await client.call_tool("bash", {"command": COMMAND}))

        paths = {"http": via_http, "mcp_stdio": lambda: via(mcp_stdio), "mcp_http": lambda: via(mcp_http)}
        for i in range(calls + WARMUP):
            for name, call in paths.items():
                started = time.perf_counter()
                output = await call()
                elapsed = (time.perf_counter() - started) * 1000
                if output != "hi\n":
                    raise RlguardError(f"{name}: unexpected output {output!r}")
                if i >= WARMUP:  # warm-up: connections, episode creation on the MCP side
                    times[name].append(elapsed)
        await http.post(f"/v1/episodes/{episode['episode_id']}/finish", headers=agent)
    return times


def run_bench(calls: int = 200) -> dict[str, Any]:
    """Measure and return the benchmark keys (see the module docstring)."""
    with tempfile.TemporaryDirectory(prefix="rlguard-bench-mcp-") as tmp:
        server = GatewayUnderTest(Path(tmp))
        mcp_proc = None
        try:
            env = {**os.environ, "RLGUARD_ADMIN_TOKEN": server.token, "RLGUARD_STATE_DIR": tmp}
            mcp_proc, mcp_url = _start_http_mcp(server.url, env, Path(tmp) / "mcp-http.log")
            times = anyio.run(_measure, server, mcp_url, env, calls)
        finally:
            if mcp_proc is not None:
                mcp_proc.terminate()
                mcp_proc.wait(timeout=60)
            server.stop()
    http_p50 = statistics.median(times["http"])
    stdio_p50 = statistics.median(times["mcp_stdio"])
    mcp_http_p50 = statistics.median(times["mcp_http"])
    return {
        "mcp_call_ms_p50": round(stdio_p50, 3),
        "mcp_http_call_ms_p50": round(mcp_http_p50, 3),
        "http_call_ms_p50": round(http_p50, 3),
        "mcp_vs_http": round(stdio_p50 / http_p50, 4),
        "mcp_http_vs_http": round(mcp_http_p50 / http_p50, 4),
        "calls_measured": len(times["http"]),
    }
