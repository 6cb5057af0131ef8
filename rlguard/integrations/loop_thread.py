"""An asyncio loop in a daemon thread, for synchronous harnesses that call the async gateway client.

Why not anyio's blocking portal: its loop runs in a non-daemon worker thread that the interpreter
joins at exit, so a harness that never closes what it opened (``mini`` does not close its
environment) hangs at exit forever. A daemon thread does not keep the process alive, and it still
runs while ``atexit`` hooks do, which is when :func:`close_at_exit` finishes what was left open.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import threading
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

T = TypeVar("T")
CALL_TIMEOUT_S = 3600.0
STOP_TIMEOUT_S = 10.0


class LoopThread:
    """One event loop, run forever in a daemon thread until :meth:`stop`."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def call(self, fn: Callable[..., Awaitable[T]], *args: Any, timeout: float = CALL_TIMEOUT_S) -> T:
        """Run ``fn(*args)`` on the loop and wait for its result (its exception is raised here)."""
        if not self._thread.is_alive() or self.loop.is_closed():
            raise RuntimeError("the event loop thread has stopped")
        future = asyncio.run_coroutine_threadsafe(_run(fn, *args), self.loop)
        return future.result(timeout)

    def stop(self) -> None:
        """Stop the loop and join its thread (idempotent)."""
        if self.loop.is_closed():
            return
        if self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(STOP_TIMEOUT_S)
        if not self._thread.is_alive():
            with contextlib.suppress(RuntimeError):
                self.loop.close()


async def _run(fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    return await fn(*args)


class Closable(Protocol):
    def close(self) -> None: ...


def close_at_exit(resource: Closable) -> None:
    """Close ``resource`` when the process ends, unless it is gone (or closed) by then."""
    ref = weakref.ref(resource)

    def close() -> None:
        alive = ref()
        if alive is not None:
            with contextlib.suppress(Exception):
                alive.close()

    atexit.register(close)
