"""The proxy's client of the policy server against real misbehaving HTTP servers on loopback: every
failure is one clear status for the harness (the server's own 4xx, 502, 504) and bounded in bytes
and time; an unreachable server is retried, an answer is never."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from gateway.services.policy_upstream import PolicyUpstream, UpstreamError

GOOD = {"choices": [{"text": "ok", "token_ids": [7, 8], "logprobs": {"token_logprobs": [-0.5, -0.25]}}]}


def _app(hits: list[str]) -> web.Application:
    async def completions(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        kind = body["model"]
        hits.append(kind)
        if kind == "good":
            assert request.headers["Authorization"] == "Bearer k" and body["prompt"] == [1, 2, 3]
            return web.json_response({**GOOD, "policy_version": 4})
        if kind == "refused":
            return web.json_response({"error": {"message": "max_tokens too large"}}, status=400)
        if kind == "broken":
            return web.json_response({"detail": "engine died"}, status=500)
        if kind == "text":
            return web.Response(text="<html>not json</html>")
        if kind == "huge":
            return web.Response(body=b"[" + b"1," * 600_000 + b"1]", content_type="application/json")
        await asyncio.sleep(3)  # "slow": answers after the client's 1 s timeout
        return web.json_response(GOOD)

    app = web.Application()
    app.router.add_post("/v1/completions", completions)
    return app


@pytest.fixture
async def server() -> AsyncIterator[tuple[str, list[str]]]:
    hits: list[str] = []
    runner = web.AppRunner(_app(hits))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    yield f"http://127.0.0.1:{port}/v1", hits
    await runner.cleanup()


async def test_an_answer_is_read_and_every_failure_is_one_clear_status(server: tuple[str, list[str]]) -> None:
    url, hits = server
    upstream = PolicyUpstream(url, "k", timeout_s=1.0, max_response_bytes=1_000_000)
    try:
        generation = await upstream.generate("good", [1, 2, 3], {"max_tokens": 2})
        assert (generation.token_ids, generation.logprobs, generation.version) == ([7, 8], [-0.5, -0.25], "4")
        expected = {
            "refused": (400, "max_tokens too large"),  # the server's own 4xx: the harness's mistake
            "broken": (502, "engine died"),
            "text": (502, "not JSON"),
            "huge": (502, "larger than 1000000 bytes"),
            "slow": (504, "did not answer in time"),
        }
        for model, (status, words) in expected.items():
            with pytest.raises(UpstreamError, match=words) as caught:
                await upstream.generate(model, [1], {"max_tokens": 2})
            assert caught.value.status == status, model
        assert hits.count("slow") == 1 and hits.count("broken") == 1  # an answer is never retried
    finally:
        await upstream.aclose()


async def test_an_unreachable_server_is_retried_then_a_502() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed once the block ends: connections are refused
    upstream = PolicyUpstream(f"http://127.0.0.1:{port}/v1", None, timeout_s=5.0, max_response_bytes=1000)
    try:
        started = asyncio.get_running_loop().time()
        with pytest.raises(UpstreamError, match="unreachable") as caught:
            await upstream.models()
        assert caught.value.status == 502
        assert asyncio.get_running_loop().time() - started >= 0.2 + 0.4  # two back-offs: three tries
    finally:
        await upstream.aclose()
