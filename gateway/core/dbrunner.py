"""Runs blocking store calls off the event loop.

SQLite allows one writer: a single worker thread serialises writes without lock contention (and
keeps each transaction short). PostgreSQL gets a small pool of threads.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

from store.engine import is_sqlite
from store.repository import Store

P = ParamSpec("P")
R = TypeVar("R")


class DbRunner:
    def __init__(self, store: Store, url: str) -> None:
        self.store = store
        workers = 1 if is_sqlite(url) else 8
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rlguard-db")

    async def run(self, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(fn, *args, **kwargs))

    def close(self) -> None:
        self._executor.shutdown(wait=True)
        self.store.close()
