"""Fixtures for the red team's sandbox probes: one real hardened sandbox shared by the whole module.

The backend has its own instance name, so its gc never touches other areas' containers, and a
later session's gc removes what a killed session left behind.
"""

from collections.abc import AsyncIterator

import docker
import pytest

from sandbox.base import SandboxSpec
from sandbox.docker_backend import DockerBackend
from sandbox.docker_sandbox import DockerSandbox
from sandbox.image import ensure_image
from sandbox.settings import SandboxLimits, SandboxSettings

PIDS_LIMIT = 128


@pytest.fixture(scope="session")
def redteam_image() -> str:
    client = docker.from_env()
    try:
        return ensure_image(client)
    finally:
        client.close()


@pytest.fixture(scope="session")
async def redteam_backend(redteam_image: str, sandbox_runtime: str) -> AsyncIterator[DockerBackend]:
    """The attacker's backend, once per runtime (runc, gVisor's runsc): every probe runs under both."""
    limits = SandboxLimits(
        memory="256m", workspace_size="64m", tmp_size="32m", pids=PIDS_LIMIT, exec_timeout_s=20
    )
    settings = SandboxSettings(image=redteam_image, limits=limits, runtime=sandbox_runtime)
    instance = "test-redteam" if sandbox_runtime == "runc" else f"test-redteam-{sandbox_runtime}"
    backend = DockerBackend(instance, None, settings)
    yield backend
    await backend.close()


@pytest.fixture(scope="session")
async def victim(redteam_backend: DockerBackend, redteam_image: str) -> AsyncIterator[DockerSandbox]:
    """The attacker's sandbox: every probe runs in it, one after another."""
    sandbox = await redteam_backend.create(
        SandboxSpec(image=redteam_image, limits=redteam_backend.settings.limits, episode_id="redteam")
    )
    yield sandbox
    await sandbox.destroy()
