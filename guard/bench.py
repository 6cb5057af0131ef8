"""``rlguard bench guard``: stage-1 (normalise + rules) throughput on one core, latency p50/p99.

Stage 1 keeps a bounded cache of readings keyed by a hash of the call's content
(``guard.cache.NormalizeCache``, with the rule match of each reading): in an episode the same
``pytest -q``, the same ``cat`` of a file and the same file content recur, and the tail of stage-1
latency is large written Python files read again. The headline numbers (``p50_us``, ``p99_us``,
``calls_per_s``) are measured as the gateway runs: the corpus is evaluated once (warm-up), then
``rounds`` times, so repeated calls hit the cache. ``cold_*`` are the same calls with the cache
cleared before each one: a full normalisation and rule pass, what a call never seen before costs.
Nothing else is memoised except compiled regexes and the parser (built once at import, as in the
gateway). The process is pinned to one CPU where the OS allows it. The 1-minute load average is
reported next to the numbers: on a shared machine other processes steal the core and inflate every
wall-clock figure, so the per-call CPU time (``cpu_p50_us``, ``cpu_p99_us``, ``calls_per_cpu_s``)
is reported beside the wall-clock one.

It also measures the pathological call of red-team round 2 (``a=x; a=$a$a; ...`` doubled 27 and
34 times; before the normalisation budgets it took 387 ms and then an out-of-memory kill): its
stage-1 time and peak memory (cache cleared), which the budgets keep at a few milliseconds and
kilobytes.
"""

from __future__ import annotations

import os
import statistics
import time
import tracemalloc
from pathlib import Path
from typing import Any

from guard.errors import GuardError
from guard.eval import load_corpus
from guard.rules import RuleEngine
from guard.types import ToolCall

DEFAULT_CORPUS = Path(__file__).resolve().parent.parent / "tests" / "guard" / "corpus.jsonl"


def _pin_one_core() -> int | None:
    try:
        cpus = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpus[-1]})
        return cpus[-1]
    except (AttributeError, OSError):
        return None


def _percentile(sorted_values: list[float], q: float) -> float:
    index = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[index]


def run_guard_bench(corpus: Path | None = None, rounds: int = 5) -> dict[str, Any]:
    """Measure stage 1 over every call of ``corpus`` (default: the shipped test corpus)."""
    path = Path(corpus) if corpus else DEFAULT_CORPUS
    if not path.is_file():
        raise GuardError(f"{path}: corpus not found (pass a corpus file)")
    calls = [row.call for row in load_corpus(path)]
    engine = RuleEngine.load()
    cpu = _pin_one_core()
    for call in calls:  # warm-up: first-use costs (regex caches, lazy imports) are not per-call
        engine.evaluate(call)
    latencies: list[float] = []
    cpu_latencies: list[float] = []
    wall_ns = time.perf_counter_ns
    cpu_ns = time.process_time_ns
    started = time.perf_counter()
    cpu_started = time.process_time()
    for _ in range(rounds):
        for call in calls:
            t0, c0 = wall_ns(), cpu_ns()
            engine.evaluate(call)
            c1, t1 = cpu_ns(), wall_ns()
            latencies.append((t1 - t0) / 1000)
            cpu_latencies.append((c1 - c0) / 1000)
    wall = time.perf_counter() - started
    cpu_time = time.process_time() - cpu_started
    latencies.sort()
    cpu_latencies.sort()
    cold: list[float] = []
    cold_cpu: list[float] = []
    cache = engine.normalize_cache
    for call in calls:
        cache.clear()
        t0, c0 = wall_ns(), cpu_ns()
        engine.evaluate(call)
        c1, t1 = cpu_ns(), wall_ns()
        cold.append((t1 - t0) / 1000)
        cold_cpu.append((c1 - c0) / 1000)
    cold.sort()
    cold_cpu.sort()
    return {
        "calls_per_s": round(len(latencies) / wall, 1),
        "calls_per_cpu_s": round(len(latencies) / cpu_time, 1) if cpu_time else None,
        "p50_us": round(_percentile(latencies, 0.50), 1),
        "p99_us": round(_percentile(latencies, 0.99), 1),
        "mean_us": round(statistics.fmean(latencies), 1),
        "cpu_p50_us": round(_percentile(cpu_latencies, 0.50), 1),
        "cpu_p99_us": round(_percentile(cpu_latencies, 0.99), 1),
        "max_us": round(latencies[-1], 1),
        "distinct_calls": len(calls),
        "measured_calls": len(latencies),
        "result_cache": True,
        "cold_p50_us": round(_percentile(cold, 0.50), 1),
        "cold_p99_us": round(_percentile(cold, 0.99), 1),
        "cold_cpu_p50_us": round(_percentile(cold_cpu, 0.50), 1),
        "cold_cpu_p99_us": round(_percentile(cold_cpu, 0.99), 1),
        "cold_calls_per_cpu_s": round(len(cold_cpu) / (sum(cold_cpu) / 1e6), 1) if sum(cold_cpu) else None,
        "pinned_cpu": cpu,
        "load_avg_1m": round(os.getloadavg()[0], 2),
        **_doubling_bomb(engine),
    }


def _doubling_bomb(engine: RuleEngine) -> dict[str, Any]:
    """Stage-1 wall time and peak traced memory of the doubling bomb at 27 and 34 doublings."""
    out: dict[str, Any] = {}
    for n in (27, 34):
        call = ToolCall("bash", {"command": "a=x; " + "a=$a$a; " * n + "echo $a"})
        engine.normalize_cache.clear()
        tracemalloc.start()
        started = time.perf_counter()
        result = engine.evaluate(call)
        elapsed = time.perf_counter() - started
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        out[f"bomb_{n}_ms"] = round(elapsed * 1000, 2)
        out[f"bomb_{n}_peak_kib"] = round(peak / 1024)
        out[f"bomb_{n}_rule"] = result.match.rule_id if result.match else None
    return out
