"""The guard's review of a graded patch, applied to the reward (``finish`` and ``rlguard grade``).

``pytest``-mode grading puts the final patch in its details; the guard reviews it
(``guard.review``), and the policy decides what a tampering verdict does: ``zero`` (default) scores
the episode 0, ``flag`` keeps the reward and only marks it. Either way the review is stored in the
details, where the episode view and the audit (``/v1/audit/patches``, ``rlguard audit patches``,
the audit page) find it.
"""

from __future__ import annotations

from typing import Any, Literal

from guard.review import PatchReview

PatchReviewPolicy = Literal["zero", "flag"]


def apply_patch_review(
    reward: float, details: dict[str, Any], review: PatchReview, policy: PatchReviewPolicy
) -> tuple[float, dict[str, Any]]:
    """``(reward, details)`` after the review: details gain ``patch_review``; tampering under
    ``zero`` sets the reward to 0 and ``reason`` to ``tampering``, keeping the graded values."""
    out = {**details, "patch_review": {**review.to_dict(), "policy": policy}}
    if review.findings:
        out["patch_flag"] = "tampering" if review.tampering else "suspect"
    if review.tampering and policy == "zero":
        out["graded_reward"], out["graded_reason"] = reward, details.get("reason")
        out["reason"], out["resolved"] = "tampering", False
        return 0.0, out
    return reward, out
