"""Column types shared by the models and the migrations (migrations must not import the models)."""

import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, DateTime, Text, TypeDecorator


class UTCDateTime(TypeDecorator[datetime]):
    """Aware UTC datetimes on every backend (SQLite stores no zone: we store naive UTC, read aware)."""

    impl = DateTime
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        return value.astimezone(UTC).replace(tzinfo=None)

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        return None if value is None else value.replace(tzinfo=UTC)


# PostgreSQL's text (and jsonb, and json read as text) cannot hold U+0000, but a command's output or a
# written file may. Rather than drop the byte or lose the record, NUL is escaped on the way in and
# restored on the way out, with an escape character from the private-use area that is itself escaped,
# so every string round-trips exactly. SQLite stores NUL as is and is left untouched.
NUL_ESCAPE = "\ue000"
_UNESCAPE = re.compile(NUL_ESCAPE + "([0e])")


def escape_nul(value: str) -> str:
    """``value`` without NUL characters, reversibly (see :func:`unescape_nul`)."""
    if "\0" not in value and NUL_ESCAPE not in value:
        return value
    return value.replace(NUL_ESCAPE, NUL_ESCAPE + "e").replace("\0", NUL_ESCAPE + "0")


def unescape_nul(value: str) -> str:
    """The string :func:`escape_nul` was given."""
    if NUL_ESCAPE not in value:
        return value
    return _UNESCAPE.sub(lambda m: "\0" if m.group(1) == "0" else NUL_ESCAPE, value)


def _map_strings(value: Any, fn: Callable[[str], str]) -> Any:
    """``value`` (decoded JSON) with ``fn`` applied to every string, keys included."""
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, dict):
        return {fn(k) if isinstance(k, str) else k: _map_strings(v, fn) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_map_strings(v, fn) for v in value]
    return value


def _escapes(dialect: Any) -> bool:
    return dialect.name == "postgresql"


class NulSafeText(TypeDecorator[str]):
    """Text that may hold NUL on every backend (escaped on PostgreSQL)."""

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect: Any) -> str | None:
        return escape_nul(value) if value is not None and _escapes(dialect) else value

    def process_result_value(self, value: str | None, dialect: Any) -> str | None:
        return unescape_nul(value) if value is not None and _escapes(dialect) else value


class NulSafeJSON(TypeDecorator[Any]):
    """JSON whose strings may hold NUL on every backend (escaped on PostgreSQL)."""

    impl = JSON
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Any) -> Any:
        return _map_strings(value, escape_nul) if value is not None and _escapes(dialect) else value

    def process_result_value(self, value: Any, dialect: Any) -> Any:
        return _map_strings(value, unescape_nul) if value is not None and _escapes(dialect) else value
