"""Request and response bodies of the v1 API (the OpenAPI schema is generated from these)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from contract.calls import ToolAnswer
from contract.trajectory import EndReason
from store.codec import decode_action_mask


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# -- episodes ----------------------------------------------------------------------------------


class CreateEpisodeRequest(_Strict):
    task: str = Field(
        min_length=3, max_length=200, pattern=r"^[^/\s]+/[^/\s]+$", description="<suite>/<task_id>"
    )
    policy_version: str | None = Field(None, min_length=1, max_length=200)


class CreateEpisodeResponse(BaseModel):
    episode_id: str
    agent_token: str
    tools: list[dict[str, Any]]


class FinishRequest(_Strict):
    """Optional body of ``finish``: why the runner ended the episode. The trainer bootstraps episodes
    cut off by a limit (max_turns, max_tokens, timeout, context_full) from the critic instead of 0."""

    end_reason: EndReason | None = None


class FinishResponse(BaseModel):
    """The stored outcome: ``reward`` is null only when the grader itself failed (status failed);
    an ungradable workspace is 0.0 with ``details["ungradable"]`` saying why."""

    reward: float | None
    details: dict[str, Any]


class SubTrajectoryCreated(BaseModel):
    episode_id: str
    index: int
    num_tokens: int


class _RecordedCall(BaseModel):
    """The fields of a recorded tool call that the episode view and the audit view both show."""

    seq: int
    tool: str
    arguments: dict[str, Any]
    normalized: str
    action: str
    stage: str | None
    rule_id: str | None
    category: str | None
    confidence: float | None
    reason: str
    answer: ToolAnswer = Field(description="What the agent was shown (the decoy when was_decoy)")
    was_decoy: bool
    created_at: datetime


def recorded_call_fields(call: Any) -> dict[str, Any]:
    """``_RecordedCall``'s fields read from a stored tool-call row (``store.models``)."""
    return {
        "seq": call.seq,
        "tool": call.tool,
        "arguments": call.arguments,
        "normalized": call.normalized,
        "action": call.action,
        "stage": call.stage,
        "rule_id": call.rule_id,
        "category": call.category,
        "confidence": call.confidence,
        "reason": call.reason,
        "answer": ToolAnswer(
            output=call.answer_output, exit_code=call.answer_exit_code, truncated=call.answer_truncated
        ),
        "was_decoy": call.was_decoy,
        "created_at": call.created_at,
    }


class ToolCallView(_RecordedCall):
    exit_code: int | None
    timed_out: bool
    guard_ms: float
    exec_ms: float
    total_ms: float


class SubTrajectorySummary(BaseModel):
    index: int
    num_tokens: int
    num_action_tokens: int
    policy_version: str | None
    trainable: bool
    consumed_at: datetime | None
    consumed_by_step: int | None


class EpisodeView(BaseModel):
    episode_id: str
    task: str
    policy_version: str | None
    status: str
    reward: float | None
    sandbox_id: str | None
    num_calls: int
    created_at: datetime
    last_activity_at: datetime
    finished_at: datetime | None
    details: dict[str, Any]
    tool_calls: list[ToolCallView]
    sub_trajectories: list[SubTrajectorySummary]
    sandbox_engine: str | None = Field(None, description="The engine of the fleet holding the sandbox")
    owner_instance: str | None = Field(None, description="The gateway instance that runs (ran) it")
    owner_url: str | None = Field(None, description="Where that gateway answers its calls")

    @classmethod
    def from_row(cls, row: Any) -> EpisodeView:
        """The view of a stored episode (``store.models.EpisodeRow`` with its calls and rows)."""
        return cls(
            episode_id=row.id,
            task=row.task_id,
            policy_version=row.policy_version,
            status=row.status,
            reward=row.reward,
            sandbox_id=row.sandbox_id,
            num_calls=row.num_calls,
            created_at=row.created_at,
            last_activity_at=row.last_activity_at,
            finished_at=row.finished_at,
            details=row.details,
            sandbox_engine=row.sandbox_engine,
            owner_instance=row.owner_instance,
            owner_url=row.owner_url,
            tool_calls=[
                ToolCallView(
                    **recorded_call_fields(c),
                    exit_code=c.exit_code,
                    timed_out=c.timed_out,
                    guard_ms=c.guard_ms,
                    exec_ms=c.exec_ms,
                    total_ms=c.total_ms,
                )
                for c in row.tool_calls
            ],
            sub_trajectories=[
                SubTrajectorySummary(
                    index=s.index,
                    num_tokens=s.num_tokens,
                    num_action_tokens=int(decode_action_mask(s.action_mask).sum()),
                    policy_version=s.policy_version,
                    trainable=s.trainable,
                    consumed_at=s.consumed_at,
                    consumed_by_step=s.consumed_by_step,
                )
                for s in row.sub_trajectories
            ],
        )


# -- tasks and audit ---------------------------------------------------------------------------


class TaskView(BaseModel):
    id: str
    suite: str
    instructions: str
    image: str
    details: dict[str, Any] = Field(default_factory=dict)


class InterceptView(_RecordedCall):
    id: int
    episode_id: str
    task: str
    policy_version: str | None


class PatchReviewView(BaseModel):
    """An episode whose final patch the guard reviewed with findings (see ``guard.review``)."""

    episode_id: str
    task: str
    policy_version: str | None
    finished_at: datetime | None
    reward: float | None
    graded_reward: float | None = Field(description="The tests' reward before the review's policy applied")
    flag: str = Field(
        description="tampering (a rule that decoys matched) or suspect (escalate/flag rules only)"
    )
    policy: str | None
    findings: list[dict[str, Any]]
    patch: str = Field(description="The final patch (diff of the final workspace against the base)")


class PatchReviewPage(BaseModel):
    items: list[PatchReviewView]
    next_offset: int | None = Field(description="Offset of the next page; null on the last page")


class InterceptPage(BaseModel):
    items: list[InterceptView]
    next_offset: int | None = Field(description="Offset of the next page; null on the last page")


# -- episodes a person can see (GET /v1/episodes, GET /v1/episodes/{id}/trajectory) -------------


class EpisodeSummary(BaseModel):
    """One episode of the list: how it ended, what it earned, whether it can train."""

    episode_id: str
    task: str
    policy_version: str | None
    status: str
    reward: float | None
    end_reason: str | None
    num_calls: int
    intercepts: int
    sub_trajectories: int
    drift: int | None = Field(description="Model turns the harness sent back changed (model proxy only)")
    audit_only: str | None = Field(description="Why the episode has no sub-trajectory to train on")
    created_at: datetime
    finished_at: datetime | None


class EpisodePage(BaseModel):
    items: list[EpisodeSummary]
    next_offset: int | None = Field(description="Offset of the next page; null on the last page")


class TurnView(BaseModel):
    """One model turn: what the model wrote, the tool calls it emitted, the gateway calls they became."""

    sub_index: int
    kind: str = Field(description="first | continued | drift | rewrite (model proxy), or runner")
    text: str
    tool_calls: list[dict[str, Any]]
    gateway_seqs: list[int | None]
    finish_reason: str
    prompt_tokens: int
    generated_tokens: int
    version: str | None


class CallView(_RecordedCall):
    """A gateway call as the episode view shows it: the raw call first, the guard's reading beside."""

    command: str = Field(description="The call as the agent sent it (bash command, path, ...)")
    touched: str | None = Field(description="Intercepted calls: what the real call would have touched")
    timed_out: bool


class SubTrajectoryDetail(SubTrajectorySummary):
    turns: list[TurnView]


class TrajectoryView(BaseModel):
    """An episode turn by turn, with its reward, tests and patch review."""

    episode: EpisodeSummary
    tests: dict[str, str] = Field(default_factory=dict, description="Hidden test -> outcome")
    grading: dict[str, Any] = Field(description="How it was graded: reason, patch review, errors")
    model_proxy: dict[str, Any] | None
    sub_trajectories: list[SubTrajectoryDetail]
    calls: list[CallView]
