"""Store fixtures: a migrated database per test, on SQLite and (marked) on a real PostgreSQL server."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from rlguard.store.migrate import upgrade
from rlguard.store.repository import Store


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'store.db'}"


@pytest.fixture
def pg_database(postgres_url: str) -> Iterator[str]:
    """A fresh database on the test server, dropped afterwards (other areas share the server)."""
    name = f"rlguard_store_{uuid.uuid4().hex[:10]}"
    admin = create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(postgres_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request) -> str:
    if request.param == "sqlite":
        return request.getfixturevalue("sqlite_url")
    return request.getfixturevalue("pg_database")


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    upgrade(db_url)
    store = Store.from_url(db_url)
    yield store
    store.close()
