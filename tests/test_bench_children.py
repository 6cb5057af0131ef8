"""The benchmarks' servers end with the benchmark: one killed by a signal (no ``finally`` runs)
leaves no gateway, and so no sandbox, behind."""

from __future__ import annotations

import time
from pathlib import Path

import docker
import pytest

from tests.support.killed_parent import parent_running

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
    client = docker.from_env()
    instance = ""
    try:
        with parent_running(_BENCHMARK, str(tmp_path)) as bench:
            instance = bench.first_line
            assert instance.startswith("bench-"), instance
            assert any("rlguard serve" in c for c in bench.commands())
            deadline = time.monotonic() + 60
            while not _sandboxes(client, instance) and time.monotonic() < deadline:
                time.sleep(0.5)  # the gateway's warm pool
            assert _sandboxes(client, instance), "the gateway started no sandbox"
            assert bench.kill() == []
            assert _sandboxes(client, instance) == []  # the gateway removed its own on SIGTERM
    finally:
        for container in _sandboxes(client, instance) if instance else []:
            container.remove(force=True)  # only when the test failed
