"""Round 3, finding 4a: ``rlguard mcp serve --transport http`` gave any local client one sandbox per
session and no cap on sessions.

The attack, for real: a client opens session after session over plain JSON-RPC on loopback and
makes each one start an episode (a sandbox of the real engine, through the real gateway). Now
sessions and episodes are capped per client (its address; ``127.0.0.2`` is a second client on the
same loopback) and in all: over a cap a new session gets HTTP 429 and an episode an MCP error, each
saying which cap and what to do, and the gateway never runs more episodes than the caps allow.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest

from tests.integrations.conftest import Gateway, child_env
from tests.integrations.test_mcp import _free_port, _serve_args

pytestmark = pytest.mark.docker

CAPS = ["--max-sessions-per-client", "2", "--max-sessions", "3", "--max-episodes-per-client", "1",
        "--max-episodes", "2"]  # fmt: skip
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.fixture
def capped(gateway: Gateway) -> Iterator[tuple[str, str]]:
    """An http MCP server with small caps; yields its /mcp URL and the policy version it records."""
    version = f"caps-{uuid.uuid4().hex[:8]}"
    port = _free_port()
    args = _serve_args(gateway, version, "--transport", "http", "--port", str(port), *CAPS)
    proc = subprocess.Popen([sys.executable, *args], env=child_env(gateway), stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/mcp"
    deadline = time.monotonic() + 60
    while True:
        try:
            httpx.get(url, timeout=1)
            break
        except httpx.TransportError:
            assert time.monotonic() < deadline and proc.poll() is None, "the MCP server did not start"
            time.sleep(0.1)
    try:
        yield url, version
    finally:
        proc.terminate()
        proc.wait(timeout=60)


class RawClient:
    """An MCP client over bare JSON-RPC from a chosen loopback address (what an attacker would write)."""

    def __init__(self, url: str, address: str = "127.0.0.1") -> None:
        self.url = url
        self.http = httpx.Client(transport=httpx.HTTPTransport(local_address=address), timeout=180)
        self.ids = 0

    def _post(self, body: dict, session: str | None) -> httpx.Response:
        headers = dict(HEADERS)
        if session:
            headers["mcp-session-id"] = session
            headers["mcp-protocol-version"] = "2025-06-18"
        return self.http.post(self.url, json=body, headers=headers)

    def open(self) -> httpx.Response:
        self.ids += 1
        params = {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "x", "version": "1"},
        }
        answer = self._post(
            {"jsonrpc": "2.0", "id": self.ids, "method": "initialize", "params": params}, None
        )
        if answer.status_code == 200:
            session = answer.headers["mcp-session-id"]
            self._post({"jsonrpc": "2.0", "method": "notifications/initialized"}, session)
        return answer

    def call(self, session: str, tool: str, arguments: dict) -> dict:
        self.ids += 1
        body = {
            "jsonrpc": "2.0",
            "id": self.ids,
            "method": "tools/call",
            "params": {"name": tool, "arguments": arguments},
        }
        answer = self._post(body, session)
        assert answer.status_code == 200, answer.text
        return answer.json()

    def close(self, session: str) -> None:
        self.http.delete(
            self.url, headers={**HEADERS, "mcp-session-id": session, "mcp-protocol-version": "2025-06-18"}
        )


def _running(gateway: Gateway, version: str) -> int:
    return sum(1 for e in gateway.episodes_of(version) if e["status"] == "running")


def test_sessions_are_capped_per_client_and_in_all(capped: tuple[str, str]) -> None:
    url, _ = capped
    first, second = RawClient(url), RawClient(url, "127.0.0.2")
    a, b = (first.open() for _ in range(2))
    assert a.status_code == b.status_code == 200
    over = first.open()
    assert over.status_code == 429
    assert "too many MCP sessions from this client (2 open)" in over.json()["error"]["message"]
    c = second.open()  # another client still has room ...
    assert c.status_code == 200
    full = second.open()  # ... until the server's own cap
    assert full.status_code == 429 and "maximum of 3 sessions" in full.json()["error"]["message"]
    first.close(a.headers["mcp-session-id"])  # ending a session frees its slot
    assert second.open().status_code == 200


def test_episodes_are_capped_and_nothing_is_created_over_the_cap(
    gateway: Gateway, capped: tuple[str, str]
) -> None:
    url, version = capped
    client = RawClient(url)
    one, two = (client.open().headers["mcp-session-id"] for _ in range(2))
    ran = client.call(one, "bash", {"command": "echo one"})
    assert "one" in ran["result"]["content"][0]["text"]
    refused = client.call(two, "bash", {"command": "echo two"})
    assert "too many episodes (sandboxes) from this client" in refused["error"]["message"]
    assert _running(gateway, version) == 1
    client.call(one, "submit", {})  # a submitted episode's sandbox is gone: its slot is free
    answer = client.call(two, "bash", {"command": "echo two"})
    assert "two" in answer["result"]["content"][0]["text"]
    assert client.call(one, "bash", {"command": "ls"})["result"]["isError"]  # ended, nothing new
    three = client.open()
    assert three.status_code == 429  # sessions still count: one and two are open
    client.close(one)
    four = client.open().headers["mcp-session-id"]
    refused = client.call(four, "bash", {"command": "echo four"})  # two still runs its episode
    assert "too many episodes" in refused["error"]["message"]
    assert _running(gateway, version) == 1
    client.close(two)
    client.close(four)
