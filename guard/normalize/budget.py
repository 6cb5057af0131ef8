"""Budgets for one normalisation: value sizes, total work and wall time, for every step.

Why: static reading evaluates what the agent's text computes (variables, ``${a//x/y}``,
``printf`` repeats, decoders, nested ``eval``), and a short text can ask for an exponential
amount (``a=x; a=$a$a; a=$a$a; ...`` doubles 30 times in 250 characters). Every step that
produces text charges its size here before or as it builds it; over budget the call raises
``Unparseable`` and is escalated, so one call costs at most a bounded amount of memory and time.

The budget of the call being normalised is kept per thread (normalisation runs in worker
threads off the gateway's event loop), so leaf helpers (``words``, ``decode``, ``pycode``)
charge it without a parameter threaded through every signature; outside ``budgeted()`` a
fresh default budget applies.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

MAX_VALUE_CHARS = 64 * 1024  # one variable value, one word, one decoded or computed text
MAX_WORK_CHARS = 8 * 1024 * 1024  # characters produced by all steps of one call together
MAX_CALL_S = 2.0  # wall-time backstop for one call; the size budgets bind long before it


class Unparseable(Exception):
    """The call cannot be read statically (syntax error, too big, too deep, over budget): escalate it."""


@dataclass
class Budget:
    """What one call may still spend; ``charge`` and ``value`` raise ``Unparseable`` beyond it."""

    max_value_chars: int = MAX_VALUE_CHARS
    max_work_chars: int = MAX_WORK_CHARS
    max_seconds: float = MAX_CALL_S
    work: int = 0
    deadline: float = field(default=0.0)

    def __post_init__(self) -> None:
        if not self.deadline:
            self.deadline = time.perf_counter() + self.max_seconds

    def charge(self, chars: int, what: str = "text") -> None:
        """Count ``chars`` characters of work (before building them, where the size is known)."""
        self.work += max(0, chars)
        if self.work > self.max_work_chars:
            raise Unparseable(f"over the work budget ({self.max_work_chars} characters) computing {what}")
        if time.perf_counter() > self.deadline:
            raise Unparseable(f"over the time budget ({self.max_seconds:g} s)")

    def value(self, chars: int, what: str = "value") -> None:
        """Refuse one value longer than the value budget, and charge it as work."""
        if chars > self.max_value_chars:
            raise Unparseable(f"{what} over {self.max_value_chars} characters")
        self.charge(chars, what)


_LOCAL = threading.local()


def current() -> Budget:
    """The budget of the call being normalised on this thread; outside ``budgeted()`` a fresh
    default one per step (a leaf helper used on its own is still bounded, step by step)."""
    budget = getattr(_LOCAL, "budget", None)
    return budget if budget is not None else Budget()


@contextlib.contextmanager
def budgeted(budget: Budget | None = None) -> Iterator[Budget]:
    """Make ``budget`` (a fresh default one when None) this thread's budget for the block."""
    previous = getattr(_LOCAL, "budget", None)
    active = budget if budget is not None else Budget()
    _LOCAL.budget = active
    try:
        yield active
    finally:
        _LOCAL.budget = previous


def charge(chars: int, what: str = "text") -> None:
    """``current().charge``: for leaf helpers."""
    current().charge(chars, what)


def value(chars: int, what: str = "value") -> None:
    """``current().value``: for leaf helpers."""
    current().value(chars, what)
