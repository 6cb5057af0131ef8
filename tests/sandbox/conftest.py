"""Fixtures for the sandbox tests: the real image, one backend per session, fresh sandboxes.

Every test here runs against the real Docker engine. The backend has its own instance name, so its
gc never touches containers of other test areas or of a running gateway.
"""

from collections.abc import AsyncIterator

import docker
import pytest

from sandbox.base import SandboxSpec
from sandbox.docker_backend import DockerBackend
from sandbox.docker_sandbox import DockerSandbox
from sandbox.image import ensure_image
from sandbox.settings import SandboxLimits, SandboxSettings


@pytest.fixture(scope="session")
def docker_client() -> docker.DockerClient:
    client = docker.from_env()
    yield client
    client.close()


@pytest.fixture(scope="session")
def sandbox_image(docker_client: docker.DockerClient) -> str:
    """The rlguard sandbox image, built offline if missing (the test command's set-up does it too)."""
    return ensure_image(docker_client)


@pytest.fixture(scope="session")
def instance(sandbox_runtime: str) -> str:
    """A fixed name per runtime: a later session's gc removes what a killed session left (owners
    are checked)."""
    return "test-sandbox" if sandbox_runtime == "runc" else f"test-sandbox-{sandbox_runtime}"


@pytest.fixture(scope="session")
async def backend(sandbox_image: str, instance: str, sandbox_runtime: str) -> AsyncIterator[DockerBackend]:
    """The session's backend, once per runtime (runc, gVisor's runsc)."""
    settings = SandboxSettings(image=sandbox_image, limits=small_limits(), runtime=sandbox_runtime)
    backend = DockerBackend(instance, None, settings)
    yield backend
    await backend.close()


def small_limits(**overrides: object) -> SandboxLimits:
    """Limits small enough that 32 sandboxes and the bombs stay cheap on a 2-core machine."""
    base = {
        "memory": "256m",
        "workspace_size": "64m",
        "tmp_size": "32m",
        "pids": 128,
        "exec_timeout_s": 20,
        "fsize_bytes": 48 << 20,
    }
    return SandboxLimits(**{**base, **overrides})


@pytest.fixture
def spec(sandbox_image: str) -> SandboxSpec:
    return SandboxSpec(image=sandbox_image, limits=small_limits(), episode_id="ep-test")


@pytest.fixture
async def sandbox(backend: DockerBackend, spec: SandboxSpec) -> AsyncIterator[DockerSandbox]:
    """A fresh sandbox for one test, destroyed afterwards."""
    sandbox = await backend.create(spec)
    yield sandbox
    await sandbox.destroy()


@pytest.fixture(scope="session")
async def shared(backend: DockerBackend, sandbox_image: str) -> AsyncIterator[DockerSandbox]:
    """One sandbox shared by the probes that leave it as they found it (keeps container counts small)."""
    sandbox = await backend.create(
        SandboxSpec(image=sandbox_image, limits=small_limits(), episode_id="shared")
    )
    yield sandbox
    await sandbox.destroy()
