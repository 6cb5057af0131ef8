"""The machine's busy CPU time, to say what bounds a benchmark on a small machine.

A loop that keeps ``c`` cores busy out of ``n`` can gain at most ``n / c`` by overlapping its work
(the same work, packed onto every core); the loop benchmark reports it next to what it measured.
"""

from __future__ import annotations

import psutil


def busy_cpu_seconds() -> float:
    """CPU seconds all cores have spent not idle since boot (every process, the kernel included)."""
    times = psutil.cpu_times()
    busy = ("user", "nice", "system", "irq", "softirq", "steal")
    return float(sum(getattr(times, name, 0.0) for name in busy))
