"""Prometheus metrics of one gateway (its own registry, so several apps can live in one process)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


class GatewayMetrics:
    """Calls by action and category, call latency, live sandboxes, judge latency and errors."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.calls = Counter(
            "rlguard_tool_calls_total",
            "Tool calls answered, by tool, guard action and category",
            ["tool", "action", "category"],
            registry=self.registry,
        )
        self.call_seconds = Histogram(
            "rlguard_tool_call_seconds",
            "Tool call latency inside the gateway (guard + sandbox or decoy + store)",
            ["tool"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.live_sandboxes = Gauge(
            "rlguard_live_sandboxes", "Sandboxes held by running episodes", registry=self.registry
        )
        self.episodes = Counter(
            "rlguard_episodes_total",
            "Episodes by how they ended (or 'started')",
            ["status"],
            registry=self.registry,
        )
        self.judge_seconds = Histogram(
            "rlguard_judge_seconds",
            "LLM judge latency (stage 2)",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.judge_errors = Counter(
            "rlguard_judge_errors_total",
            "Judge calls that failed (fail mode applied)",
            registry=self.registry,
        )
        self.engine_up = Gauge(
            "rlguard_engine_up", "1 while the sandbox engine answers", ["engine"], registry=self.registry
        )
        self.engine_sandboxes = Gauge(
            "rlguard_engine_sandboxes",
            "Sandboxes this gateway holds on the engine (warm ones included)",
            ["engine"],
            registry=self.registry,
        )
        #: Each engine's ``{"name", "up", "in_use", ...}`` (the fleet's status), read at each scrape.
        self.engines: Callable[[], list[dict[str, Any]]] | None = None

    def render(self) -> bytes:
        for engine in self.engines() if self.engines is not None else []:
            self.engine_up.labels(engine["name"]).set(1 if engine["up"] else 0)
            self.engine_sandboxes.labels(engine["name"]).set(engine["in_use"])
        return generate_latest(self.registry)
