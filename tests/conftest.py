"""Fixtures shared by every test area: the real PostgreSQL server and the Docker engine."""

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# A shared 2-core CI machine can be slow to generate examples; that is no failure of the code under
# test. Deadlines are off for the same reason (timing belongs in benchmarks, not tests).
settings.register_profile(
    "rlguard", deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]
)
settings.load_profile("rlguard")

REPO = Path(__file__).resolve().parent.parent
RUNTIMES_ENV = "RLGUARD_TEST_RUNTIMES"


def test_runtimes() -> list[str]:
    """The OCI runtimes the sandbox and red-team tests run under: ``RLGUARD_TEST_RUNTIMES``
    (comma-separated), by default both runc and gVisor's runsc (``scripts/test.sh`` registers it)."""
    return [r.strip() for r in os.environ.get(RUNTIMES_ENV, "runc,runsc").split(",") if r.strip()]


test_runtimes.__test__ = False  # a helper, not a test


@pytest.fixture(scope="session", params=test_runtimes())
def sandbox_runtime(request: pytest.FixtureRequest) -> str:
    """Each runtime in turn (the tests that take it run once per runtime). One the engine does not
    know is a failure that says how to register it, never a skip."""
    runtime = request.param
    if runtime != "runc":
        import docker

        client = docker.from_env()
        try:
            known = set((client.info().get("Runtimes") or {}).keys())
        finally:
            client.close()
        if runtime not in known:
            pytest.fail(
                f"the Docker engine has no {runtime!r} runtime: run scripts/ensure_runsc.sh "
                f"(or set {RUNTIMES_ENV}=runc)"
            )
    return runtime


@pytest.fixture(scope="session")
def postgres_url() -> str:
    """A real PostgreSQL server on loopback (``scripts/ensure_postgres.sh`` installs and starts it)."""
    url = os.environ.get("RLGUARD_TEST_POSTGRES_URL")
    if not url:
        url = subprocess.run(
            ["bash", str(REPO / "scripts" / "ensure_postgres.sh")], capture_output=True, text=True, check=True
        ).stdout.strip()
        os.environ["RLGUARD_TEST_POSTGRES_URL"] = url
    return url


@pytest.fixture
def pg_database(postgres_url: str) -> Iterator[str]:
    """A fresh database on the shared test server, dropped afterwards (each area's tests stay apart)."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    name = f"rlguard_test_{uuid.uuid4().hex[:10]}"
    admin = create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(postgres_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'store.db'}"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request) -> str:
    """The same test on SQLite and on the real PostgreSQL server."""
    if request.param == "sqlite":
        return request.getfixturevalue("sqlite_url")
    return request.getfixturevalue("pg_database")


@pytest.fixture(scope="session")
def second_engine():
    """A second Docker engine beside the main one (``scripts/ensure_second_engine.sh`` starts it)."""
    from tests.support.engines import ensure_second_engine

    return ensure_second_engine()
