"""The real parts ``rlguard bench scale`` runs on: gateway processes, a database of its own on a
PostgreSQL server, the second Docker engine, and the episodes it drives over HTTP.

Everything is started here and stopped afterwards; nothing is patched or simulated: gateways are
``rlguard serve`` children in their own process groups (SIGKILL hits only them), the second engine
is the dockerd ``scripts/ensure_second_engine.sh`` keeps beside the main one, and an episode is the
v1 API's create, calls and finish.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from rlguard.bench.children import free_port, start_gateway, wait_until_answers
from rlguard.errors import RlguardError

REPO = Path(__file__).resolve().parents[2]
TASK = "builtin/matrix-transpose"
MAIN_ENGINE = "unix:///var/run/docker.sock"
START_TIMEOUT_S = 240


def second_engine() -> str:
    """The second engine's URL, started if needed (by the checkout's script)."""
    script = REPO / "scripts" / "ensure_second_engine.sh"
    if not script.is_file():
        raise RlguardError("bench scale needs scripts/ensure_second_engine.sh (run it from a checkout)")
    result = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        raise RlguardError(f"the second engine did not start: {result.stderr.strip()[-500:]}")
    return result.stdout.strip().splitlines()[-1]


def kill_second_engine() -> None:
    """SIGKILL the second engine's dockerd (by its own pid file)."""
    root = Path(os.environ.get("RLGUARD_ENGINE2_ROOT", "/tmp/rlguard-dockerd2"))
    os.kill(int((root / "docker.pid").read_text().strip()), signal.SIGKILL)


def postgres_server() -> str:
    """The PostgreSQL server URL: RLGUARD_TEST_POSTGRES_URL, else the checkout's ensure_postgres.sh."""
    url = os.environ.get("RLGUARD_TEST_POSTGRES_URL")
    if url:
        return url
    script = REPO / "scripts" / "ensure_postgres.sh"
    result = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        raise RlguardError(f"no PostgreSQL server: {result.stderr.strip()[-500:]}")
    return result.stdout.strip()


class BenchDatabase:
    """A database of the bench's own on the server, dropped when closed."""

    def __init__(self, server_url: str) -> None:
        from sqlalchemy import create_engine, text
        from sqlalchemy.engine import make_url

        self.name = f"rlguard_bench_{secrets.token_hex(5)}"
        self._admin = create_engine(server_url, isolation_level="AUTOCOMMIT")
        with self._admin.connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{self.name}"'))
        self.url = make_url(server_url).set(database=self.name).render_as_string(hide_password=False)

    def statuses(self, episode_ids: list[str]) -> dict[str, str]:
        from sqlalchemy import create_engine, text

        engine = create_engine(self.url)
        try:
            with engine.connect() as connection:
                rows = connection.execute(text("SELECT id, status FROM episodes")).all()
        finally:
            engine.dispose()
        wanted = set(episode_ids)
        return {episode_id: status for episode_id, status in rows if episode_id in wanted}

    def activity(self) -> tuple[int, int]:
        """(transactions committed, rows inserted + updated) in this database so far (PostgreSQL's
        cumulative statistics: a backend reports after its transaction, or within a second idle)."""
        from sqlalchemy import create_engine, text

        engine = create_engine(self.url)
        try:
            with engine.connect() as connection:
                row = connection.execute(
                    text(
                        "SELECT xact_commit, tup_inserted + tup_updated FROM pg_stat_database "
                        "WHERE datname = current_database()"
                    )
                ).one()
        finally:
            engine.dispose()
        return int(row[0]), int(row[1])

    def tool_call_bytes(self) -> float:
        """Bytes the call log takes per recorded call (table, indexes and TOAST)."""
        from sqlalchemy import create_engine, text

        engine = create_engine(self.url)
        try:
            with engine.connect() as connection:
                size, count = connection.execute(
                    text("SELECT pg_total_relation_size('tool_calls'), count(*) FROM tool_calls")
                ).one()
        finally:
            engine.dispose()
        return float(size) / max(1, int(count))

    def close(self) -> None:
        from sqlalchemy import text

        with self._admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)'))
        self._admin.dispose()


class ServeProcess:
    """``rlguard serve`` as a child process with its own environment."""

    def __init__(self, state: Path, token: str, env: dict[str, str]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.instance = env["RLGUARD_INSTANCE"]
        state.mkdir(parents=True, exist_ok=True)
        full_env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("RLGUARD_")},
            "RLGUARD_STATE_DIR": str(state),
            "RLGUARD_ADMIN_TOKEN": token,
            "PYTHONPATH": str(REPO),
            **env,
        }
        self.log_path = state / f"gateway-{self.port}.log"
        self._log = self.log_path.open("wb")
        self.proc = start_gateway(self.port, full_env, self._log)
        try:
            wait_until_answers(self.proc, f"{self.url}/healthz", "gateway", self.log_path, START_TIMEOUT_S)
        except RlguardError:
            self.kill()
            raise

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
        self._log.close()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)
        self._log.close()


@dataclass
class Driven:
    """What one driven episode did: its id (once created), calls answered, how it ended for the client."""

    episode_id: str | None = None
    calls: int = 0
    outcome: str = "not started"  # finished | infra_error | error: ... | lost gateway
    reward: float | None = None
    details: dict[str, Any] = field(default_factory=dict)


async def drive_episode(
    client: httpx.AsyncClient,
    url: str,
    token: str,
    calls: int,
    command: str = "echo hi",
    created: asyncio.Event | None = None,
    start_calls: asyncio.Event | None = None,
) -> Driven:
    """Create, ``calls`` bash calls, finish; a 503 at creation is retried (placement), a lost
    gateway or an ended episode stops it. ``created``/``start_calls`` hold it at a barrier."""
    driven = Driven()
    admin = {"Authorization": f"Bearer {token}"}
    try:
        return await _drive(client, url, admin, calls, command, driven, created, start_calls)
    except httpx.TransportError:
        driven.outcome = "lost gateway"
        return driven
    finally:
        if created is not None:
            created.set()  # a failed creation must not hold the barrier


async def _drive(
    client: httpx.AsyncClient,
    url: str,
    admin: dict[str, str],
    calls: int,
    command: str,
    driven: Driven,
    created: asyncio.Event | None,
    start_calls: asyncio.Event | None,
) -> Driven:
    """The episode's life (see ``drive_episode``)."""
    for attempt in range(30):
        response = await client.post(
            f"{url}/v1/episodes", json={"task": TASK, "policy_version": "bench"}, headers=admin
        )
        if response.status_code != 503:
            break
        await asyncio.sleep(min(2.0, 0.2 * (attempt + 1)))
    if response.status_code != 200:
        driven.outcome = f"error: create {response.status_code}"
        return driven
    body = response.json()
    driven.episode_id = body["episode_id"]
    agent = {"Authorization": f"Bearer {body['agent_token']}"}
    if created is not None:
        created.set()
    if start_calls is not None:
        await start_calls.wait()
    for _ in range(calls):
        response = await client.post(
            f"{url}/v1/episodes/{driven.episode_id}/calls",
            json={"tool": "bash", "arguments": {"command": command}},
            headers=agent,
        )
        if response.status_code == 409:
            driven.outcome = str(response.json().get("status", "ended"))
            return driven
        if response.status_code != 200:
            driven.outcome = f"error: call {response.status_code}"
            return driven
        driven.calls += 1
    response = await client.post(f"{url}/v1/episodes/{driven.episode_id}/finish", headers=agent)
    if response.status_code == 409:
        driven.outcome = str(response.json().get("status", "ended"))
        return driven
    if response.status_code != 200:
        driven.outcome = f"error: finish {response.status_code}"
        return driven
    result = response.json()
    driven.reward, driven.details = result["reward"], result["details"]
    driven.outcome = str(result["details"].get("status", "finished"))
    return driven


def engines_json(*engines: dict[str, Any]) -> str:
    return json.dumps(list(engines))


def count_containers(engine_url: str, instances: list[str]) -> int:
    """Containers labelled with any of ``instances`` on the engine (what a run left behind)."""
    import docker

    client = docker.DockerClient(base_url=engine_url, timeout=60)
    try:
        return sum(
            len(client.containers.list(all=True, filters={"label": f"rlguard.instance={name}"}))
            for name in instances
        )
    finally:
        client.close()


def remove_containers(engine_url: str, instances: list[str]) -> None:
    """Remove what the bench's own instances left (after counting it as leaked)."""
    import docker

    client = docker.DockerClient(base_url=engine_url, timeout=60)
    try:
        for name in instances:
            for container in client.containers.list(all=True, filters={"label": f"rlguard.instance={name}"}):
                container.remove(force=True)
    finally:
        client.close()
