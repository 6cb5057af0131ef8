"""The schema comes only from the Alembic migrations, and it matches the models exactly."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text

from store.engine import make_engine, normalize_url
from store.migrate import current_revision, downgrade, head_revision, upgrade
from store.models import Base

TABLES = {"tasks", "episodes", "sub_trajectories", "tool_calls"}


def test_upgrade_creates_schema_identical_to_models(db_url: str) -> None:
    assert current_revision(db_url) is None
    upgrade(db_url)
    assert current_revision(db_url) == head_revision()
    engine = make_engine(db_url)
    try:
        with engine.connect() as conn:
            assert set(inspect(conn).get_table_names()) >= TABLES
            diff = compare_metadata(
                MigrationContext.configure(conn, opts={"compare_type": True}), Base.metadata
            )
        assert diff == []
    finally:
        engine.dispose()


def test_upgrade_is_idempotent_and_downgrade_round_trips(db_url: str) -> None:
    upgrade(db_url)
    upgrade(db_url)
    downgrade(db_url, "base")
    engine = make_engine(db_url)
    try:
        with engine.connect() as conn:
            assert not TABLES & set(inspect(conn).get_table_names())
    finally:
        engine.dispose()
    upgrade(db_url)
    assert current_revision(db_url) == head_revision()


def test_sqlite_runs_in_wal_mode_with_busy_timeout(sqlite_url: str) -> None:
    upgrade(sqlite_url)
    engine = make_engine(sqlite_url)
    try:
        with engine.connect() as conn:
            assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
            assert conn.execute(text("PRAGMA busy_timeout")).scalar() >= 5000
            assert conn.execute(text("PRAGMA foreign_keys")).scalar() == 1
    finally:
        engine.dispose()


def test_plain_postgresql_url_uses_psycopg3() -> None:
    assert normalize_url("postgresql://u:p@127.0.0.1:5432/db").startswith("postgresql+psycopg://u:p@")
