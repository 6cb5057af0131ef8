"""Rows as the gateway writes them, for tests that fill a store directly."""

from __future__ import annotations

from store.models import ToolCallRow, utcnow


def tool_call(
    episode_id: str, seq: int, action: str = "allow", category: str | None = None, stage: str = "rules"
) -> ToolCallRow:
    """One recorded bash call: ``decoy`` answered with a decoy, ``flag`` run for real and flagged,
    ``allow`` run for real."""
    return ToolCallRow(
        episode_id=episode_id,
        seq=seq,
        tool="bash",
        arguments={"command": f"echo {seq}"},
        normalized=f"echo {seq}",
        action=action,
        stage=stage,
        rule_id="r1" if action != "allow" else None,
        category=category,
        confidence=0.9,
        reason="because" if action != "allow" else "",
        answer_output=f"{seq}\n",
        answer_exit_code=0,
        answer_truncated=False,
        was_decoy=action == "decoy",
        exit_code=0,
        timed_out=False,
        guard_ms=0.1,
        exec_ms=1.0,
        total_ms=1.5,
        created_at=utcnow(),
    )
