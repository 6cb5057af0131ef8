"""``rlguard bench proxy``: a model turn through the gateway's recording proxy beside the same turn
sent straight to the same policy server.

The built-in policy server over the tiny model runs as an ``rlguard policy serve`` subprocess and
the gateway as an ``rlguard serve`` subprocess whose proxy forwards to it, so neither shares the
load generator's interpreter. One conversation grows turn by turn (the proxy's reply and a short
user turn appended each time, restarted every ``TURNS_PER_CONVERSATION`` turns); each turn is sent
both ways, alternating which goes first, greedy (temperature 0) with the same ``max_tokens``, so
load on a shared machine falls on both alike. The proxy's extra work is an HTTP hop, rendering and
tokenising what the harness added, and recording the turn. Target: ``proxy_vs_direct <= 1.1``.
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from rlguard.bench.children import free_port, start_child, wait_until_answers
from rlguard.bench.gateway import TASK, GatewayUnderTest
from rlguard.errors import RlguardError

WARMUP = 4
TURNS_PER_CONVERSATION = 6
SYSTEM = "You are a coding agent. Fix the bug, run the tests, then submit."


class PolicyUnderTest:
    """``rlguard policy serve`` over a model directory, in a child process on a free loopback port."""

    def __init__(self, model: Path, log: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.log = log.open("wb")
        self.proc = start_child(
            [
                sys.executable,
                "-m",
                "rlguard",
                "policy",
                "serve",
                "--model",
                str(model),
                "--port",
                str(self.port),
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            wait_until_answers(self.proc, f"http://127.0.0.1:{self.port}/health", "policy server", log)
        except RlguardError:
            self.stop()
            raise

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.log.close()


def _turn(
    client: httpx.Client, url: str, headers: dict[str, str], messages: list[dict[str, Any]], max_tokens: int
) -> tuple[float, dict[str, Any]]:
    body = {"model": "tiny", "messages": messages, "max_tokens": max_tokens, "temperature": 0.0}
    started = time.perf_counter()
    response = client.post(url, json=body, headers=headers)
    elapsed = (time.perf_counter() - started) * 1000
    if response.status_code != 200:
        raise RlguardError(f"{url}: {response.status_code} {response.text[:300]}")
    return elapsed, response.json()


def _measure(
    gateway: GatewayUnderTest, policy: PolicyUnderTest, turns: int, max_tokens: int
) -> dict[str, Any]:
    admin = {"Authorization": f"Bearer {gateway.token}"}
    with httpx.Client(timeout=300) as client:
        body = {"task": TASK, "policy_version": "bench-proxy"}
        created = client.post(f"{gateway.url}/v1/episodes", json=body, headers=admin)
        if created.status_code != 200:
            raise RlguardError(f"could not create an episode: {created.status_code} {created.text[:300]}")
        episode = created.json()
        agent = {"Authorization": f"Bearer {episode['agent_token']}"}
        proxy_url = f"{gateway.url}/v1/episodes/{episode['episode_id']}/model/v1/chat/completions"
        direct_url = f"{policy.url}/chat/completions"
        times: dict[str, list[float]] = {"proxy": [], "direct": []}
        generated: dict[str, list[int]] = {"proxy": [], "direct": []}
        messages: list[dict[str, Any]] = []
        for number in range(turns + WARMUP):
            if number % TURNS_PER_CONVERSATION == 0:
                messages = [
                    {"role": "system", "content": SYSTEM},
                    {"role": "user", "content": "Fix matrixlib."},
                ]
            order = ("proxy", "direct") if number % 2 == 0 else ("direct", "proxy")
            answers = {}
            for path in order:
                url, headers = (proxy_url, agent) if path == "proxy" else (direct_url, {})
                elapsed, answers[path] = _turn(client, url, headers, messages, max_tokens)
                if number >= WARMUP:
                    times[path].append(elapsed)
                    generated[path].append(int(answers[path]["usage"]["completion_tokens"]))
            reply = answers["proxy"]["choices"][0]["message"]
            messages += [{"role": "assistant", "content": reply.get("content") or ""},
                         {"role": "user", "content": f"Step {number}: go on."}]  # fmt: skip
        client.post(f"{gateway.url}/v1/episodes/{episode['episode_id']}/finish", headers=agent)
    return {"times": times, "generated": generated}


def run_bench(model: Path, turns: int = 60, max_tokens: int = 32) -> dict[str, Any]:
    """Measure and return the benchmark keys (see the module docstring)."""
    with tempfile.TemporaryDirectory(prefix="rlguard-bench-proxy-") as tmp:
        policy = PolicyUnderTest(model, Path(tmp) / "policy.log")
        gateway = None
        try:
            # the policy server names no host path, so the gateway is told where the tokenizer is
            proxy_env = {
                "RLGUARD_GATEWAY__POLICY_URL": policy.url,
                "RLGUARD_GATEWAY__POLICY_TOKENIZER": str(model),
            }
            gateway = GatewayUnderTest(Path(tmp), proxy_env)
            measured = _measure(gateway, policy, turns, max_tokens)
        finally:
            if gateway is not None:
                gateway.stop()
            policy.stop()
    proxy_p50 = statistics.median(measured["times"]["proxy"])
    direct_p50 = statistics.median(measured["times"]["direct"])
    return {
        "proxy_ms_p50": round(proxy_p50, 3),
        "direct_ms_p50": round(direct_p50, 3),
        "proxy_vs_direct": round(proxy_p50 / direct_p50, 4),
        "proxy_ms_p90": round(statistics.quantiles(measured["times"]["proxy"], n=10)[-1], 3),
        "direct_ms_p90": round(statistics.quantiles(measured["times"]["direct"], n=10)[-1], 3),
        "generated_tokens_mean_proxy": round(statistics.mean(measured["generated"]["proxy"]), 2),
        "generated_tokens_mean_direct": round(statistics.mean(measured["generated"]["direct"]), 2),
        "turns_measured": len(measured["times"]["proxy"]),
        "load_average_1m": round(os.getloadavg()[0], 2),
    }
