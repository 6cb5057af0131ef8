"""What every grading mode returns: the reward and the evidence behind it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class GradeResult:
    """The reward and the per-test evidence behind it (``details`` is JSON-serialisable).

    ``changes`` is the final workspace as the patch review reads it (``guard.review.ChangedFile``
    per file that differs from the task's base), handed to the reviewer and never stored: the
    stored, readable form is ``details["patch"]``.
    """

    reward: float
    passed: int
    failed: int
    errors: int
    total: int
    details: dict[str, Any] = field(default_factory=dict)
    changes: tuple[Any, ...] | None = None
