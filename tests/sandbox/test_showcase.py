"""The demo's sandbox step: the project's tests pass inside, and every probe is refused."""

import pytest

from sandbox.docker_backend import DockerBackend
from sandbox.showcase import run_showcase

pytestmark = pytest.mark.docker


async def test_showcase_passes_tests_and_refuses_every_probe(backend: DockerBackend) -> None:
    report = await run_showcase(backend)
    assert report.tests.exit_code == 0 and "3 passed" in report.tests.output
    refused = {p.probe.name: p.refused for p in report.probes}
    assert all(refused.values()), {p.probe.name: p.result.output for p in report.probes if not p.refused}
    assert report.ok
