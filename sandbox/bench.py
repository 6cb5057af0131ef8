"""``rlguard bench sandbox``: start-up, exec round trip and concurrency, all measured in one run.

- ``cold_start_ms_p50``: ``backend.create`` with a small workspace (container start, runner up,
  workspace copied in);
- ``warm_acquire_ms_p50``: ``WarmPool.acquire`` of a pre-started sandbox, same workspace;
- ``exec_ms_p50/p99``: ``echo hi`` through the fast path (the in-sandbox runner), from the event loop;
- ``docker_exec_ms_p50``: the same command with the docker SDK's ``exec_run`` on the same container;
- ``concurrent_sandboxes``: sandboxes started at once that all answer a command;
- ``file_writes_2000_s`` / ``process_starts_200_s``: syscall-heavy work timed inside one sandbox
  (2,000 small files written and closed by Python; 200 ``/bin/true`` started by bash), where
  gVisor's ``runsc`` pays most for its second wall.

The runtime is the configured one (``RLGUARD_SANDBOX__RUNTIME=runc|runsc``); the report names it
and the load average it ran under (these numbers follow the machine's load closely).
"""

from __future__ import annotations

import asyncio
import io
import os
import statistics
import tarfile
import time

from sandbox.base import SandboxSpec
from sandbox.docker_backend import DockerBackend
from sandbox.pool import WarmPool
from sandbox.settings import SandboxEnv, SandboxLimits, SandboxSettings

KEYS = (
    "runtime",
    "cold_start_ms_p50",
    "warm_acquire_ms_p50",
    "exec_ms_p50",
    "exec_ms_p99",
    "docker_exec_ms_p50",
    "exec_vs_docker_exec",
    "concurrent_sandboxes",
    "file_writes_2000_s",
    "process_starts_200_s",
    "load_avg_1m",
)
FILE_WRITES = (
    "python3 -c 'import os,time\nt=time.perf_counter()\nfor i in range(2000):\n"
    '    f=open("/workspace/w%d" % i, "w"); f.write("x"); f.close()\n'
    "print(time.perf_counter()-t)'"
)
PROCESS_STARTS = (
    "python3 -c 'import subprocess,time\nt=time.perf_counter()\n"
    'subprocess.run(["bash", "-c", "for i in $(seq 200); do /bin/true; done"])\n'
    "print(time.perf_counter()-t)'"
)


def _workspace() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, text in {
            "pkg/__init__.py": "",
            "pkg/calc.py": "def add(a, b):\n    return a + b\n",
        }.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def run_bench(
    configured: SandboxEnv, samples: int = 200, concurrent: int = 32, starts: int = 8
) -> dict[str, float | int | str]:
    """Measure everything on a fresh backend (its own instance name) and clean up after."""
    limits = SandboxLimits(memory="256m", workspace_size="64m", tmp_size="32m")
    settings = SandboxSettings(
        image=configured.sandbox.image, limits=limits, runtime=configured.sandbox.runtime
    )
    backend = DockerBackend(f"bench-{os.getpid()}", configured.docker_host, settings)
    spec = SandboxSpec(image=backend.default_image, limits=limits, workspace=_workspace())
    report: dict[str, float | int | str] = {"runtime": settings.runtime}
    try:
        await backend.gc()
        cold = []
        for _ in range(starts):
            started = time.perf_counter()
            sandbox = await backend.create(spec)
            cold.append((time.perf_counter() - started) * 1000)
            await sandbox.destroy()
        report["cold_start_ms_p50"] = statistics.median(cold)

        pool = WarmPool(backend, size=2)
        await pool.start(spec)
        warm = []
        try:
            for _ in range(starts):
                while pool.ready_count(spec) == 0:
                    await asyncio.sleep(0.02)
                started = time.perf_counter()
                sandbox = await pool.acquire(spec)
                warm.append((time.perf_counter() - started) * 1000)
                await sandbox.destroy()
        finally:
            await pool.close()
        report["warm_acquire_ms_p50"] = statistics.median(warm)

        sandbox = await backend.create(spec)
        for _ in range(10):
            await sandbox.exec("echo hi")
        fast = []
        for _ in range(samples):
            started = time.perf_counter()
            await sandbox.exec("echo hi")
            fast.append((time.perf_counter() - started) * 1000)
        container = backend.client.containers.get(sandbox.id)

        def docker_exec_times() -> list[float]:
            times = []
            for _ in range(max(20, samples // 5)):
                started = time.perf_counter()
                container.exec_run(["echo", "hi"], user=sandbox.user)
                times.append((time.perf_counter() - started) * 1000)
            return times

        slow = await asyncio.to_thread(docker_exec_times)
        writes = await sandbox.exec(FILE_WRITES, timeout_s=300)
        report["file_writes_2000_s"] = round(float(writes.output.split()[-1]), 3)
        procs = await sandbox.exec(PROCESS_STARTS, timeout_s=300)
        report["process_starts_200_s"] = round(float(procs.output.split()[-1]), 3)
        await sandbox.destroy()
        report["exec_ms_p50"] = statistics.median(fast)
        report["exec_ms_p99"] = _percentile(fast, 0.99)
        report["docker_exec_ms_p50"] = statistics.median(slow)
        report["exec_vs_docker_exec"] = report["exec_ms_p50"] / report["docker_exec_ms_p50"]

        many_spec = SandboxSpec(image=backend.default_image, limits=limits)
        started_all = await asyncio.gather(
            *(backend.create(many_spec) for _ in range(concurrent)), return_exceptions=True
        )
        held = [s for s in started_all if not isinstance(s, BaseException)]
        answers = await asyncio.gather(*(s.exec("echo hi") for s in held), return_exceptions=True)
        report["concurrent_sandboxes"] = sum(
            1 for a in answers if not isinstance(a, BaseException) and a.output == "hi\n"
        )
    finally:
        await backend.close()
    report["load_avg_1m"] = round(os.getloadavg()[0], 2)
    return {key: report[key] for key in KEYS if key in report}
