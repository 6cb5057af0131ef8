"""Episodes as a person reads them: the list (filters, pages) and one episode turn by turn.

Shared by ``GET /v1/episodes``, ``GET /v1/episodes/{id}/trajectory``, the audit page's episode view
and ``rlguard episodes``. A turn's text comes from what the model proxy kept; for rows rlguard's
runner uploaded (token ids only) it is decoded with the policy's tokenizer when the gateway has one
(``RLGUARD_GATEWAY__POLICY_TOKENIZER``), else only the token counts are shown.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

from gateway.core.dbrunner import DbRunner
from gateway.errors import EpisodeNotFound
from gateway.schemas import (
    CallView,
    EpisodePage,
    EpisodeSummary,
    SubTrajectoryDetail,
    TrajectoryView,
    TurnView,
    recorded_call_fields,
)
from store.codec import decode_action_mask, decode_token_ids
from store.models import EpisodeRow, SubTrajectoryRow, ToolCallRow
from store.repository import EpisodeFilter, EpisodeListing

Decoder = Callable[[list[int]], str]
GRADING_KEYS = ("reason", "status", "end_reason", "ungradable", "error", "timeout", "interrupted",
                "patch_flag", "patch_review", "graded_reward", "resolved", "audit_only")  # fmt: skip


def summary(item: EpisodeListing) -> EpisodeSummary:
    episode, details = item.episode, item.episode.details or {}
    return EpisodeSummary(
        episode_id=episode.id,
        task=episode.task_id,
        policy_version=episode.policy_version,
        status=episode.status,
        reward=episode.reward,
        end_reason=details.get("end_reason"),
        num_calls=episode.num_calls,
        intercepts=item.intercepts,
        sub_trajectories=item.sub_trajectories,
        drift=(details.get("model_proxy") or {}).get("drift"),
        audit_only=details.get("audit_only"),
        created_at=episode.created_at,
        finished_at=episode.finished_at,
    )


def raw_call(call: ToolCallRow) -> str:
    """The call as the agent sent it, in one line where it can be (the command, the path)."""
    arguments = call.arguments or {}
    if call.tool == "bash":
        return str(arguments.get("command", ""))
    if "path" in arguments and len(arguments) == 1:
        return str(arguments["path"])
    return json.dumps(arguments, ensure_ascii=False)[:4000]


def call_view(call: ToolCallRow) -> CallView:
    return CallView(
        **recorded_call_fields(call),
        command=raw_call(call),
        touched=call.normalized if call.action != "allow" else None,
        timed_out=call.timed_out,
    )


def _runner_turns(row: SubTrajectoryRow, decode: Decoder | None) -> list[TurnView]:
    """Turns of a row without the proxy's notes: each run of generated tokens (mask 1) is one."""
    ids = decode_token_ids(row.token_ids).tolist()
    mask = decode_action_mask(row.action_mask).tolist()
    turns, start, previous_end = [], None, 0
    for position, bit in enumerate([*mask, 0]):
        if bit and start is None:
            start = position
        elif not bit and start is not None:
            text = decode(ids[start:position]) if decode else ""
            turns.append(
                TurnView(sub_index=row.index, kind="runner", text=text, tool_calls=[], gateway_seqs=[],
                         finish_reason="", prompt_tokens=start - previous_end,
                         generated_tokens=position - start, version=None)
            )  # fmt: skip
            previous_end, start = position, None
    return turns


def _proxy_turns(row: SubTrajectoryRow) -> list[TurnView]:
    return [
        TurnView(
            sub_index=row.index,
            kind=str(turn.get("kind", "")),
            text=str(turn.get("text", "")),
            tool_calls=list(turn.get("tool_calls") or []),
            gateway_seqs=list(turn.get("gateway_seqs") or []),
            finish_reason=str(turn.get("finish_reason", "")),
            prompt_tokens=int(turn["start"]) - int(turn["prompt_start"]),
            generated_tokens=int(turn["end"]) - int(turn["start"]),
            version=turn.get("version"),
        )
        for turn in row.turns or []
    ]


def trajectory(episode: EpisodeRow, decode: Decoder | None) -> TrajectoryView:
    """The episode view of a stored episode loaded with its calls and sub-trajectories."""
    details = episode.details or {}
    intercepts = sum(1 for c in episode.tool_calls if c.action != "allow")
    listing = EpisodeListing(episode, intercepts, len(episode.sub_trajectories))
    subs = []
    for row in episode.sub_trajectories:
        mask = decode_action_mask(row.action_mask)
        subs.append(
            SubTrajectoryDetail(
                index=row.index,
                num_tokens=row.num_tokens,
                num_action_tokens=int(mask.sum()),
                policy_version=row.policy_version,
                trainable=row.trainable,
                consumed_at=row.consumed_at,
                consumed_by_step=row.consumed_by_step,
                turns=_proxy_turns(row) if row.turns else _runner_turns(row, decode),
            )
        )
    tests = details.get("tests")
    return TrajectoryView(
        episode=summary(listing),
        tests={str(k): str(v) for k, v in tests.items()} if isinstance(tests, dict) else {},
        grading={k: details[k] for k in GRADING_KEYS if k in details},
        model_proxy=details.get("model_proxy"),
        sub_trajectories=subs,
        calls=[call_view(c) for c in episode.tool_calls],
    )


class EpisodeViews:
    """The list and the turn-by-turn view, off the event loop."""

    def __init__(self, db: DbRunner, decoder: Callable[[], Decoder | None] | None = None) -> None:
        self.db = db
        self.decoder = decoder or (lambda: None)

    async def page(self, filters: EpisodeFilter, limit: int, offset: int) -> EpisodePage:
        rows = await self.db.run(self.db.store.list_episodes, filters, limit=limit + 1, offset=offset)
        has_more = len(rows) > limit
        return EpisodePage(
            items=[summary(r) for r in rows[:limit]], next_offset=offset + limit if has_more else None
        )

    async def trajectory(self, episode_id: str) -> TrajectoryView:
        row = await self.db.run(self.db.store.episode, episode_id, with_children=True)
        if row is None:
            raise EpisodeNotFound(episode_id)
        return await asyncio.to_thread(lambda: trajectory(row, self.decoder()))
