"""The reward policy for a reviewed patch: what the guard's review of a graded workspace, and what the
grader's run-time monitor saw, do to the reward (``finish``, ``rlguard grade``, ``rlguard tasks check``).

Three verdicts feed it:

* the review (``guard.review``): ``tampering`` when a reviewed rule would decoy a change outright or a
  structural check says so (a symlink out of the workspace or into ``.git/``, compiled code, a ``.pth``);
* the review's completeness: a change that could not be reviewed in full (over a cap, unreadable to
  the guard) is **suspect**, and counts like tampering under ``zero``;
* the monitor's findings (``details["monitor"]["findings"]``, each with the ``severity`` the grader
  gave it against the task's baseline, ``tasks/grading/monitor_policy.py``): any ``tampering`` one.

``zero`` (the default) scores the episode 0 and sets ``reason`` (``tampering``, or ``patch review
incomplete``), keeping the graded values; ``flag`` keeps the reward and only marks it. Either way the
review, the monitor's tampering findings and the policy are stored in the details, where the episode
view and the audit (``/v1/audit/patches``, ``rlguard audit patches``, the audit page) find them.
"""

from __future__ import annotations

from typing import Any, Literal

from guard.review import PatchReview

PatchReviewPolicy = Literal["zero", "flag"]


def monitor_tampering(details: dict[str, Any]) -> list[dict[str, Any]]:
    """The grader's run-time findings marked ``tampering``."""
    monitor = details.get("monitor")
    findings = monitor.get("findings") if isinstance(monitor, dict) else None
    if not isinstance(findings, list):
        return []
    return [f for f in findings if isinstance(f, dict) and f.get("severity") == "tampering"]


def _as_finding(finding: dict[str, Any]) -> dict[str, Any]:
    """A monitor finding in the shape of the review's (``guard.review.PatchFinding``)."""
    return {
        "path": str(finding.get("where", ""))[:300],
        "rule_id": f"monitor.{finding.get('finding')}",
        "category": "grader_tampering",
        "action": "decoy",
        "description": f"at run time, in {finding.get('phase')}: {finding.get('detail')}"[:500],
    }


def apply_patch_review(
    reward: float, details: dict[str, Any], review: PatchReview, policy: PatchReviewPolicy
) -> tuple[float, dict[str, Any]]:
    """``(reward, details)`` after the review and the monitor's findings (module docstring)."""
    at_run_time = monitor_tampering(details)
    tampering = review.tampering or bool(at_run_time)
    record = {**review.to_dict(), "policy": policy, "tampering": tampering}
    if at_run_time:
        record["monitor"] = at_run_time[:20]
        # shown with the review's own findings wherever findings are listed (the audit's tables)
        record["findings"] = [*record["findings"], *(_as_finding(f) for f in at_run_time[:20])]
    out = {**details, "patch_review": record}
    if tampering:
        out["patch_flag"] = "tampering"
    elif review.findings or not review.complete:
        out["patch_flag"] = "suspect"
    if (tampering or not review.complete) and policy == "zero":
        # what the tests alone gave (kept from an earlier verdict, e.g. the grader's second opinion)
        out.setdefault("graded_reward", reward)
        out.setdefault("graded_reason", details.get("reason"))
        out["reason"] = "tampering" if tampering else "patch review incomplete"
        out["resolved"] = False
        return 0.0, out
    return reward, out
