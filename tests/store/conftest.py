"""Store fixtures: a migrated database per test, on SQLite and (marked) on a real PostgreSQL server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from store.migrate import upgrade
from store.repository import Store


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    upgrade(db_url)
    store = Store.from_url(db_url)
    yield store
    store.close()
