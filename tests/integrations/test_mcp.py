"""The MCP server driven by the ``mcp`` SDK's own client, over stdio and streamable HTTP, against
a real gateway: the tools listed with the gateway's schemas, honest calls run, a cheating call
decoyed with an answer shaped exactly like a real one, the episode graded and in ``rlguard audit``."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import anyio
import httpx
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from tests.integrations.conftest import TASK, Gateway, child_env, solution_files

pytestmark = pytest.mark.docker


def _serve_args(gateway: Gateway, policy_version: str, *extra: str) -> list[str]:
    return [
        "-m",
        "rlguard",
        "mcp",
        "serve",
        "--gateway-url",
        gateway.url,
        "--task",
        TASK,
        "--policy-version",
        policy_version,
        *extra,
    ]


@asynccontextmanager
async def stdio_client(gateway: Gateway, policy_version: str) -> AsyncIterator[Client]:
    params = StdioServerParameters(
        command=sys.executable, args=_serve_args(gateway, policy_version), env=child_env(gateway)
    )
    async with Client(params, read_timeout_seconds=120) as client:
        yield client


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def http_server(gateway: Gateway, policy_version: str) -> Iterator[str]:
    """``rlguard mcp serve --transport http`` as its own process; yields its /mcp URL."""
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, *_serve_args(gateway, policy_version, "--transport", "http", "--port", str(port))],
        env=child_env(gateway),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while True:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        try:
            httpx.get(f"http://127.0.0.1:{port}/mcp", timeout=1)
            break
        except httpx.TransportError:
            assert time.monotonic() < deadline, "the MCP server did not start"
            time.sleep(0.1)
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def _text(result) -> str:
    assert len(result.content) == 1 and result.content[0].type == "text"
    return result.content[0].text


def _shape(result) -> tuple:
    dumped = result.model_dump(exclude={"content"})
    return (sorted(dumped.items()), [c.type for c in result.content])


async def _episode_through(client: Client, gateway: Gateway) -> None:
    """List the tools, run honest calls and one cheat, fix the task and submit."""
    listed = (await client.list_tools()).tools
    with gateway.admin() as admin:
        expected = admin.get("/v1/tools").json()
    assert [(t.name, t.description, t.input_schema) for t in listed] == [
        (f["function"]["name"], f["function"]["description"], f["function"]["parameters"]) for f in expected
    ]

    listing = await client.call_tool("list_dir", {"path": "."})
    assert "matrixlib/" in _text(listing).splitlines()
    tests = _text(await client.call_tool("bash", {"command": "python3 -m pytest -q"}))
    assert "passed" in tests and "[exit code" not in tests
    missing = _text(await client.call_tool("bash", {"command": "ls no-such-dir"}))
    assert "No such file" in missing and missing.endswith("[exit code: 2]")

    real = await client.call_tool("read_file", {"path": "/workspace/no_such_file.py"})
    cheat = await client.call_tool("read_file", {"path": "/reference/solution.py"})  # protected: decoyed
    assert _shape(real) == _shape(cheat)
    assert _text(real) == "read_file: /workspace/no_such_file.py: No such file or directory\n[exit code: 1]"
    assert _text(cheat) == "read_file: /reference/solution.py: No such file or directory\n[exit code: 1]"

    bad = await client.call_tool("bash", {"command": "ls", "colour": "red"})
    assert bad.is_error and "colour" in _text(bad)

    for path, content in solution_files().items():
        wrote = _text(await client.call_tool("write_file", {"path": path, "content": content}))
        assert wrote == f"Wrote {len(content)} bytes to {path}"
    assert "passed" in _text(await client.call_tool("bash", {"command": "python3 -m pytest -q"}))
    submitted = await client.call_tool("submit", {})
    assert not submitted.is_error
    after = await client.call_tool("bash", {"command": "ls"})
    assert after.is_error and "ended" in _text(after)


def _wait_ended(gateway: Gateway, policy_version: str) -> list[dict]:
    """The test's episodes once none is running (grading runs after the session has gone)."""
    deadline = time.monotonic() + 120
    while True:
        episodes = gateway.episodes_of(policy_version)
        if episodes and all(e["status"] != "running" for e in episodes):
            return episodes
        assert time.monotonic() < deadline, episodes
        time.sleep(0.5)


def _check_recorded(gateway: Gateway, policy_version: str) -> None:
    [episode] = gateway.episodes_of(policy_version)
    assert episode["status"] == "finished" and episode["reward"] == 1.0
    calls = episode["tool_calls"]
    assert [c["tool"] for c in calls][:5] == ["list_dir", "bash", "bash", "read_file", "read_file"]
    decoyed = [c for c in calls if c["was_decoy"]]
    assert [c["arguments"]["path"] for c in decoyed] == ["/reference/solution.py"]
    assert calls[-1]["tool"] == "submit"
    audit = gateway.audit(episode["episode_id"])
    assert "/reference/solution.py" in audit and "decoy" in audit


async def test_stdio_session_is_one_guarded_graded_episode(gateway: Gateway, policy_version: str) -> None:
    async with stdio_client(gateway, policy_version) as client:
        assert "matrixlib" in (client.instructions or "")
        await _episode_through(client, gateway)
    _check_recorded(gateway, policy_version)


async def test_http_session_is_one_guarded_graded_episode(
    gateway: Gateway, policy_version: str, http_server: str
) -> None:
    async with Client(http_server, read_timeout_seconds=120) as client:
        await _episode_through(client, gateway)
    _check_recorded(gateway, policy_version)


async def test_http_sessions_are_separate_episodes_ended_with_the_session(
    gateway: Gateway, policy_version: str, http_server: str
) -> None:
    async with Client(http_server) as first, Client(http_server) as second:
        await first.call_tool("write_file", {"path": "mine.txt", "content": "first"})
        seen = _text(await second.call_tool("bash", {"command": "cat mine.txt"}))
        assert "No such file" in seen  # the second session has its own sandbox
    assert len(_wait_ended(gateway, policy_version)) == 2


async def test_stdio_eof_without_submit_finishes_the_episode(gateway: Gateway, policy_version: str) -> None:
    async with stdio_client(gateway, policy_version) as client:
        assert "matrixlib" in _text(await client.call_tool("bash", {"command": "ls"}))
    # the SDK's client kills a server that outlives stdin by 2 s; the finish request it sent first
    # is the gateway's to complete
    [episode] = _wait_ended(gateway, policy_version)
    assert episode["status"] == "finished" and 0.0 <= episode["reward"] < 1.0  # graded as left


async def test_stdio_server_with_its_own_in_process_gateway(tmp_path, policy_version: str) -> None:
    import os
    import uuid

    from sqlalchemy import create_engine, text

    from tests.integrations.conftest import REPO

    db_url = f"sqlite:///{tmp_path}/own.db"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("RLGUARD_")},
        "PYTHONPATH": str(REPO),
        "RLGUARD_STATE_DIR": str(tmp_path),
        "RLGUARD_DATABASE_URL": db_url,
        "RLGUARD_INSTANCE": f"test-mcp-own-{uuid.uuid4().hex[:8]}",
        "RLGUARD_SANDBOX__WARM_POOL_SIZE": "1",
    }
    args = ["-m", "rlguard", "mcp", "serve", "--task", TASK, "--policy-version", policy_version]
    async with Client(StdioServerParameters(command=sys.executable, args=args, env=env)) as client:
        assert "matrixlib" in _text(await client.call_tool("bash", {"command": "ls"}))
        await client.call_tool("submit", {})
    engine = create_engine(db_url)
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT status, num_calls FROM episodes")).all()
    engine.dispose()
    assert rows == [("finished", 2)]


def test_unknown_task_is_one_clear_error(gateway: Gateway) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "rlguard", "mcp", "serve", "--gateway-url", gateway.url, "--task", "no-such"],
        env=child_env(gateway),
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert run.returncode == 2
    assert "no task 'no-such' in builtin; known: " in run.stderr
    assert "Traceback" not in run.stderr


def test_http_session_left_idle_is_ended_and_graded(gateway: Gateway, policy_version: str) -> None:
    port = _free_port()
    args = _serve_args(
        gateway, policy_version, "--transport", "http", "--port", str(port), "--idle-timeout", "2"
    )
    proc = subprocess.Popen([sys.executable, *args], env=child_env(gateway), stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(url, timeout=1)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline and proc.poll() is None
                time.sleep(0.1)

        async def one_call_then_vanish() -> None:
            transport = streamable_http_client(
                url, terminate_on_close=False
            )  # no DELETE: the client just goes
            async with Client(transport) as client:
                await client.call_tool("bash", {"command": "ls"})

        anyio.run(one_call_then_vanish)
        [episode] = _wait_ended(gateway, policy_version)
        assert episode["status"] == "finished" and episode["num_calls"] == 1
    finally:
        proc.terminate()
        proc.wait(timeout=60)
