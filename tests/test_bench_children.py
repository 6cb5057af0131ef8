"""The benchmarks' servers end with the benchmark: one killed by a signal (no ``finally`` runs)
leaves no gateway, and so no sandbox, behind."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import docker
import psutil
import pytest

pytestmark = pytest.mark.docker

_BENCHMARK = """
import sys, tempfile, time
from pathlib import Path
from rlguard.bench.gateway import GatewayUnderTest

gateway = GatewayUnderTest(Path(tempfile.mkdtemp(dir=sys.argv[1])))
print(gateway.instance, flush=True)
time.sleep(300)
"""


def _sandboxes(client: docker.DockerClient, instance: str) -> list:
    return client.containers.list(all=True, filters={"label": f"rlguard.instance={instance}"})


def test_a_killed_benchmark_leaves_no_gateway_or_sandbox_behind(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[1]
    bench = subprocess.Popen(
        [sys.executable, "-c", _BENCHMARK, str(tmp_path)],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        stdout=subprocess.PIPE,
        text=True,
    )
    client = docker.from_env()
    children: list[psutil.Process] = []
    instance = ""
    try:
        assert bench.stdout is not None
        instance = bench.stdout.readline().strip()
        assert instance.startswith("bench-"), instance
        children = psutil.Process(bench.pid).children()
        assert any("rlguard serve" in " ".join(c.cmdline()) for c in children)
        deadline = time.monotonic() + 60
        while not _sandboxes(client, instance) and time.monotonic() < deadline:
            time.sleep(0.5)  # the gateway's warm pool
        assert _sandboxes(client, instance), "the gateway started no sandbox"

        os.kill(bench.pid, signal.SIGKILL)
        bench.wait(timeout=30)
        _, alive = psutil.wait_procs(children, timeout=60)
        assert alive == [], [" ".join(p.cmdline()) for p in alive]
        assert _sandboxes(client, instance) == []  # the gateway removed its own on SIGTERM
    finally:
        if bench.poll() is None:
            bench.kill()
        for child in children:  # only when the test failed: nothing may outlive it
            with contextlib.suppress(psutil.Error):
                child.kill()
        for container in _sandboxes(client, instance) if instance else []:
            container.remove(force=True)
