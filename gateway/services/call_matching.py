"""Which of the gateway's recorded calls each tool call the model emitted became.

A harness turns the model's tool call into a gateway call its own way (mini-swe-agent prefixes
``export PAGER=cat; ...``, Inspect runs ``bash -c CMD``), so a model call matches the first later,
unmatched gateway call of the same tool (or ``bash``, which every harness tool can become) whose
string arguments contain each of the model's non-empty string arguments. What the harness then sends
back as the tool's result is checked for the gateway's answer: a harness that shows the model
something other than what the gateway answered is visible in ``results_seen``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from gateway.services.recording import TurnLog

ANSWER_PROBE_CHARS = 200
UNMATCHED_SHOWN = 20


class CallRecord(Protocol):
    seq: int
    tool: str
    arguments: dict[str, Any]
    answer_output: str


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value] if value.strip() else []
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def _same(model_call: dict[str, Any], record: CallRecord) -> bool:
    name = str(model_call.get("name", ""))
    if record.tool not in (name, "bash"):
        return False
    wanted = _strings(model_call.get("arguments") or {})
    if not wanted:
        return record.tool == name
    have = _strings(record.arguments)
    return all(any(w in h for h in have) for w in wanted)


def match_calls(turns: Sequence[TurnLog], records: Sequence[CallRecord]) -> dict[str, Any]:
    """Set each turn's ``gateway_seqs``; return the counts the episode's details keep."""
    used: set[int] = set()
    position = 0
    emitted = matched = seen = 0
    unmatched: list[dict[str, Any]] = []
    for number, turn in enumerate(turns):
        turn.gateway_seqs = []
        following = turns[number + 1].tool_results if number + 1 < len(turns) else []
        for call in turn.tool_calls:
            emitted += 1
            found = None
            for index in range(position, len(records)):
                record = records[index]
                if record.seq not in used and _same(call, record):
                    found, position = record, index + 1
                    break
            if found is None:
                turn.gateway_seqs.append(None)
                if len(unmatched) < UNMATCHED_SHOWN:
                    shown = {"turn": number, "name": call.get("name"), "arguments": call.get("arguments")}
                    unmatched.append(shown)
                continue
            used.add(found.seq)
            matched += 1
            turn.gateway_seqs.append(found.seq)
            probe = found.answer_output.strip()[:ANSWER_PROBE_CHARS]
            if not probe or any(probe in result for result in following):
                seen += 1
    return {
        "tool_calls": emitted,
        "tool_calls_matched": matched,
        "tool_results_seen": seen,
        "unmatched_tool_calls": unmatched,
    }
