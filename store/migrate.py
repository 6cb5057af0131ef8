"""Run the Alembic migrations from the installed package (no alembic.ini needed).

The schema is created only here, on SQLite as on PostgreSQL, so a database is always at a known
revision; the gateway calls ``upgrade`` at start and ``rlguard db upgrade`` does it by hand.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.exc import SQLAlchemyError

import migrations
from store.engine import check_connection, make_engine, normalize_url, redact
from store.errors import StoreError


def alembic_config(url: str) -> Config:
    """An Alembic config pointing at the packaged ``migrations`` directory and ``url``."""
    config = Config()
    config.set_main_option("script_location", str(Path(migrations.__file__).resolve().parent))
    config.set_main_option("sqlalchemy.url", normalize_url(url).replace("%", "%%"))
    return config


def upgrade(url: str, revision: str = "head") -> None:
    """Bring the database at ``url`` to ``revision`` (creating it when empty); an unreachable or
    unusable database is one StoreError."""
    engine = make_engine(url)
    try:
        check_connection(engine)
        with engine.begin() as connection:
            config = alembic_config(url)
            config.attributes["connection"] = connection
            command.upgrade(config, revision)
    except SQLAlchemyError as exc:
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0][:300]
        raise StoreError(f"cannot migrate the database {redact(url)!r}: {reason}") from None
    finally:
        engine.dispose()


def downgrade(url: str, revision: str) -> None:
    engine = make_engine(url)
    try:
        with engine.begin() as connection:
            config = alembic_config(url)
            config.attributes["connection"] = connection
            command.downgrade(config, revision)
    finally:
        engine.dispose()


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()
    assert head is not None
    return head


def current_revision(url: str) -> str | None:
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            return MigrationContext.configure(connection).get_current_revision()
    finally:
        engine.dispose()
