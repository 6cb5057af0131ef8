"""Fixtures for the harness adapters: one real gateway (SQLite, real guard, Docker sandboxes) on
loopback, and helpers that read back what it recorded."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]
TASK = "matrix-transpose"  # protects /reference: reading it is decoyed
TASK_REF = f"builtin/{TASK}"
SOLUTION = REPO / "tasks" / "suites" / "builtin" / TASK / "solution"


@dataclass
class Gateway:
    url: str
    admin_token: str
    db_url: str
    state_dir: Path

    def admin(self) -> httpx.Client:
        return httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {self.admin_token}"}, timeout=120
        )

    def episodes_of(self, policy_version: str) -> list[dict[str, Any]]:
        """Episodes recorded with this policy version (found through their calls), oldest first."""
        from sqlalchemy import create_engine, text

        engine = create_engine(self.db_url)
        try:
            with engine.connect() as conn:
                ids = [
                    r[0]
                    for r in conn.execute(
                        text("SELECT id FROM episodes WHERE policy_version = :pv ORDER BY created_at"),
                        {"pv": policy_version},
                    )
                ]
        finally:
            engine.dispose()
        with self.admin() as client:
            return [client.get(f"/v1/episodes/{i}").json() for i in ids]

    def audit(self, episode_id: str) -> str:
        """``rlguard audit --episode ID`` against this gateway's database: what an operator sees."""
        env = {
            **os.environ,
            "RLGUARD_DATABASE_URL": self.db_url,
            "RLGUARD_STATE_DIR": str(self.state_dir),
            "COLUMNS": "400",
            "PYTHONPATH": str(REPO),
        }
        out = subprocess.run(
            [sys.executable, "-m", "rlguard", "audit", "--episode", episode_id],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=True,
        )
        return out.stdout


@pytest.fixture(scope="session")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    from rlguard.loops.local_gateway import local_gateway
    from rlguard.settings import Settings

    state = tmp_path_factory.mktemp("integrations-gateway")
    db_url = f"sqlite:///{state}/rlguard.db"
    settings = Settings(
        state_dir=state,
        database_url=db_url,
        instance=f"test-integrations-{os.getpid()}",
        admin_token=uuid.uuid4().hex,
    )
    settings.sandbox.warm_pool_size = 2
    with local_gateway(settings) as gw:
        yield Gateway(gw.url, gw.admin_token, db_url, state)


@pytest.fixture
def policy_version() -> str:
    """A fresh policy version per test: how a test finds its own episodes in the shared store."""
    return f"adapter-{uuid.uuid4().hex[:8]}"


def solution_files() -> dict[str, str]:
    return {str(p.relative_to(SOLUTION)): p.read_text() for p in SOLUTION.rglob("*") if p.is_file()}


def child_env(gateway: Gateway) -> dict[str, str]:
    """The environment of an adapter run as its own process: this tree first, the gateway's token."""
    return {**os.environ, "PYTHONPATH": str(REPO), "RLGUARD_ADMIN_TOKEN": gateway.admin_token}


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from rollout.tinymodel import ensure_tiny_model

    return ensure_tiny_model(tmp_path_factory.mktemp("models") / "tiny")


@pytest.fixture(scope="session")
def policy(tiny_model_dir: Path) -> Iterator[Any]:
    """``rlguard policy serve`` over the tiny model on a loopback port."""
    from tests.support.policy_stack import tiny_policy

    with tiny_policy(tiny_model_dir) as served:
        yield served


@pytest.fixture(scope="session")
def proxied_gateway(tmp_path_factory: pytest.TempPathFactory, policy: Any) -> Iterator[Gateway]:
    """A gateway whose recording model proxy forwards to the tiny policy server."""
    from rlguard.loops.local_gateway import local_gateway
    from tests.support.policy_stack import proxied_settings

    state = tmp_path_factory.mktemp("proxied-gateway")
    settings = proxied_settings(state, policy.url, warm_pool_size=1)
    with local_gateway(settings) as gw:
        yield Gateway(gw.url, gw.admin_token, settings.resolved_database_url, state)
