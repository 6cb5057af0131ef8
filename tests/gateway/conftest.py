"""Gateway fixtures: real gateways (real Docker sandboxes, the real guard, real grading) on loopback.

``gateway`` is one app served by uvicorn in a thread for the whole module set (cheap: the warm
pool starts once); ``spawn_gateway`` runs ``rlguard serve`` as a real subprocess (SIGKILL and
end-to-end tests). Each gateway has its own instance label, so its sandbox gc never touches
containers of other tests or areas.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
import httpx
import pytest
import uvicorn

from gateway.app import create_app
from rlguard.settings import Settings
from sandbox import ownership

TASK = "builtin/matrix-transpose"  # protects /reference; has visible tests
INSTANCE_LABEL = ownership.INSTANCE


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Gateway:
    url: str
    admin_token: str
    db_url: str
    instance: str
    settings: Settings | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def admin(self) -> httpx.Client:
        return httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {self.admin_token}"}, timeout=120
        )

    def new_episode(self, task: str = TASK, policy_version: str | None = "v-test") -> Episode:
        with self.admin() as client:
            body: dict[str, Any] = {"task": task}
            if policy_version is not None:
                body["policy_version"] = policy_version
            response = client.post("/v1/episodes", json=body)
        assert response.status_code == 200, response.text
        data = response.json()
        return Episode(self, data["episode_id"], data["agent_token"])


@dataclass
class Episode:
    gateway: Gateway
    id: str
    token: str

    def client(self) -> httpx.Client:
        return httpx.Client(
            base_url=self.gateway.url, headers={"Authorization": f"Bearer {self.token}"}, timeout=120
        )

    def call(self, tool: str, **arguments: Any) -> httpx.Response:
        with self.client() as client:
            return client.post(f"/v1/episodes/{self.id}/calls", json={"tool": tool, "arguments": arguments})

    def finish(self) -> httpx.Response:
        with self.client() as client:
            return client.post(f"/v1/episodes/{self.id}/finish")


def gateway_settings(tmp: Path, **overrides: Any) -> Settings:
    instance = f"gwtest-{uuid.uuid4().hex[:8]}"
    settings = Settings(
        state_dir=tmp,
        instance=instance,
        admin_token=uuid.uuid4().hex + uuid.uuid4().hex,
        database_url=overrides.pop("database_url", f"sqlite:///{tmp / 'gateway.db'}"),
    )
    settings.sandbox.warm_pool_size = overrides.pop("warm_pool_size", 2)
    for key, value in overrides.items():
        setattr(settings.gateway, key, value)
    return settings


@contextlib.contextmanager
def served(app: Any) -> Iterator[str]:
    """Serve ``app`` with uvicorn (lifespan on) in a thread on a free loopback port."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=5)
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("gateway did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=60)
        sock.close()


@pytest.fixture(scope="session")
def docker_client() -> Iterator[docker.DockerClient]:
    client = docker.from_env()
    yield client
    client.close()


def containers_of(client: docker.DockerClient, instance: str) -> list[Any]:
    return client.containers.list(all=True, filters={"label": f"{INSTANCE_LABEL}={instance}"})


@pytest.fixture(scope="session")
def gateway(tmp_path_factory, docker_client) -> Iterator[Gateway]:
    """One in-process gateway (SQLite) shared by the API tests."""
    tmp = tmp_path_factory.mktemp("gateway")
    settings = gateway_settings(tmp)
    app = create_app(settings)
    with served(app) as url:
        yield Gateway(
            url=url,
            admin_token=settings.admin_token.get_secret_value(),
            db_url=settings.resolved_database_url,
            instance=settings.instance,
            settings=settings,
            extra={"app": app},
        )
    assert containers_of(docker_client, settings.instance) == [], "gateway shutdown leaked sandboxes"


@pytest.fixture
def episode(gateway: Gateway) -> Episode:
    """A running episode; left running (grading is slow): the gateway's shutdown interrupts it."""
    return gateway.new_episode()


class GatewayProcess:
    """``rlguard serve`` as a real subprocess (its own process group, so SIGKILL hits only it)."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = env
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> GatewayProcess:
        handle = self.log.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rlguard", "serve", "--host", "127.0.0.1", "--port", str(self.port)],
            env=self.env,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gateway exited: {self.log.read_text()[-3000:]}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"gateway did not answer: {self.log.read_text()[-3000:]}")

    def kill(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture
def spawn_gateway(tmp_path, docker_client) -> Iterator[Callable[..., tuple[Gateway, GatewayProcess]]]:
    """Start ``rlguard serve`` subprocesses sharing one state dir; all are stopped at the end."""
    processes: list[GatewayProcess] = []
    instance = f"gwtest-{uuid.uuid4().hex[:8]}"
    token = uuid.uuid4().hex * 2

    def spawn(
        database_url: str | None = None, *, instance_name: str | None = None, **env_extra: str
    ) -> tuple[Gateway, GatewayProcess]:
        """``env_extra``: more ``RLGUARD_*`` variables (lease times, engines)."""
        db_url = database_url or f"sqlite:///{tmp_path / 'gateway.db'}"
        env = {
            **os.environ,
            "RLGUARD_STATE_DIR": str(tmp_path),
            "RLGUARD_DATABASE_URL": db_url,
            "RLGUARD_ADMIN_TOKEN": token,
            "RLGUARD_INSTANCE": instance_name or instance,
            "RLGUARD_SANDBOX__WARM_POOL_SIZE": "1",
            **env_extra,
        }
        process = GatewayProcess(env, tmp_path / "gateway.log").start()
        processes.append(process)
        return Gateway(
            url=process.url, admin_token=token, db_url=db_url, instance=instance_name or instance
        ), process

    yield spawn
    for process in processes:
        process.stop()
    for container in containers_of(docker_client, instance):
        container.remove(force=True)


@pytest.fixture(scope="session")
def tiny_policy_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """``rlguard policy serve`` over the tiny model on a loopback port (the model proxy's upstream)."""
    from rollout.tinymodel import ensure_tiny_model
    from tests.support.policy_stack import tiny_policy

    with tiny_policy(ensure_tiny_model(tmp_path_factory.mktemp("models") / "tiny")) as served:
        yield served


@pytest.fixture(scope="session")
def proxy_gateway(tmp_path_factory: pytest.TempPathFactory, tiny_policy_server: Any) -> Iterator[Any]:
    """A gateway whose recording model proxy forwards to the tiny policy server."""
    from rlguard.loops.local_gateway import local_gateway
    from tests.support.policy_stack import proxied_settings

    state = tmp_path_factory.mktemp("proxy-gateway")
    settings = proxied_settings(state, tiny_policy_server.url, proxy_max_body_bytes=256 * 1024)
    with local_gateway(settings) as served:
        yield served
