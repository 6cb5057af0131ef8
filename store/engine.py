"""Engine and session set-up: SQLite in WAL mode by default, PostgreSQL through psycopg 3.

WAL lets readers (audit page, trainer) run beside the gateway's writer; ``synchronous=NORMAL`` in
WAL mode loses nothing on a process crash (only on power loss), which is the failure the gateway
must survive; ``busy_timeout`` makes a second writer wait instead of failing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from store.errors import StoreError

SQLITE_BUSY_TIMEOUT_MS = 10_000
CONNECT_TIMEOUT_S = 10
SUPPORTED_BACKENDS = ("sqlite", "postgresql")


def parse_url(url: str) -> URL:
    """The parsed URL, or a StoreError naming what is wrong (never a SQLAlchemy traceback)."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError) as exc:
        raise StoreError(f"not a database URL: {redact(url)!r} ({exc})") from None
    if parsed.get_backend_name() not in SUPPORTED_BACKENDS:
        raise StoreError(
            f"unsupported database {parsed.get_backend_name()!r} in {redact(url)!r}: use sqlite:/// or postgresql://"
        )
    return parsed


def redact(url: str) -> str:
    """The URL with its password hidden, for messages and logs."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):
        return "<unparseable URL>"


def normalize_url(url: str) -> str:
    """Use psycopg 3 for plain ``postgresql://`` URLs (SQLAlchemy's default driver is psycopg2)."""
    parsed = parse_url(url)
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed.render_as_string(hide_password=False)


def is_sqlite(url: str) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cursor = dbapi_conn.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def sqlite_path(url: str) -> Path | None:
    """The file of a SQLite URL (None for in-memory databases and other backends)."""
    parsed = parse_url(url)
    if parsed.get_backend_name() != "sqlite" or not parsed.database or parsed.database == ":memory:":
        return None
    return Path(parsed.database)


def make_engine(url: str) -> Engine:
    """An engine for ``url``. A SQLite file's directory must exist: a mistyped path is an error,
    not a new empty database somewhere (the default database's state directory is made by the
    settings that name it)."""
    url = normalize_url(url)
    path = sqlite_path(url)
    if path is not None and not path.parent.is_dir():
        raise StoreError(f"no directory {str(path.parent)!r} for the SQLite database {redact(url)!r}")
    try:
        if is_sqlite(url):
            engine = create_engine(
                url, connect_args={"check_same_thread": False, "timeout": SQLITE_BUSY_TIMEOUT_MS / 1000}
            )
            event.listen(engine, "connect", _sqlite_pragmas)
            return engine
        return create_engine(
            url,
            pool_pre_ping=True,
            pool_size=10,
            max_overflow=10,
            connect_args={"connect_timeout": CONNECT_TIMEOUT_S},
        )
    except (ArgumentError, NoSuchModuleError) as exc:
        raise StoreError(f"cannot use the database URL {redact(url)!r}: {exc}") from None


def check_connection(engine: Engine) -> None:
    """One round trip; a database that cannot be reached is one clear StoreError."""
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except SQLAlchemyError as exc:
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0][:300]
        where = engine.url.render_as_string(hide_password=True)
        raise StoreError(f"cannot reach the database {where!r}: {reason}") from None


def make_session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)
