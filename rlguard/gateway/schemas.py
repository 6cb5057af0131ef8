"""Request and response bodies of the v1 API (the OpenAPI schema is generated from these)."""

from __future__ import annotations

import json
import math
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from rlguard.gateway.tools import (
    BashArgs,
    EditFileArgs,
    ListDirArgs,
    ReadFileArgs,
    SubmitArgs,
    WriteFileArgs,
)

MAX_SUB_TRAJECTORY_TOKENS = 262_144
MAX_SUB_TRAJECTORY_INDEX = 100_000
MAX_VERSION_SPANS = 4096
TOKEN_ID_MAX = 2**31 - 1


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# -- tool calls --------------------------------------------------------------------------------


class _Call(_Strict):
    @field_validator("arguments", mode="before", check_fields=False)
    @classmethod
    def _arguments_as_json_text(cls, value: Any) -> Any:
        """Accept OpenAI's ``function.arguments`` as is: a JSON object serialised to a string."""
        if isinstance(value, str):
            try:
                return json.loads(value) if value.strip() else {}
            except ValueError as exc:
                raise ValueError(f"arguments is a string but not JSON: {exc}") from None
            except RecursionError:
                raise ValueError("arguments is a string nested too deeply to be tool arguments") from None
        return value


class BashCall(_Call):
    tool: Literal["bash"]
    arguments: BashArgs


class ReadFileCall(_Call):
    tool: Literal["read_file"]
    arguments: ReadFileArgs


class WriteFileCall(_Call):
    tool: Literal["write_file"]
    arguments: WriteFileArgs


class EditFileCall(_Call):
    tool: Literal["edit_file"]
    arguments: EditFileArgs


class ListDirCall(_Call):
    tool: Literal["list_dir"]
    arguments: ListDirArgs = Field(default_factory=ListDirArgs)


class SubmitCall(_Call):
    tool: Literal["submit"]
    arguments: SubmitArgs = Field(default_factory=SubmitArgs)


CallRequest = Annotated[
    BashCall | ReadFileCall | WriteFileCall | EditFileCall | ListDirCall | SubmitCall,
    Field(discriminator="tool"),
]


class ToolAnswerBody(BaseModel):
    """The one answer shape, real or decoy."""

    output: str
    exit_code: int
    truncated: bool


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


EndReason = Literal["submitted", "max_turns", "max_tokens", "timeout", "context_full", "error"]


class FinishRequest(_Strict):
    """Optional body of ``finish``: why the runner ended the episode. The trainer bootstraps episodes
    cut off by a limit (max_turns, max_tokens, timeout, context_full) from the critic instead of 0."""

    end_reason: EndReason | None = None


class FinishResponse(BaseModel):
    """The stored outcome: ``reward`` is null only when the grader itself failed (status failed);
    an ungradable workspace is 0.0 with ``details["ungradable"]`` saying why."""

    reward: float | None
    details: dict[str, Any]


class SubTrajectoryUpload(_Strict):
    """One sub-trajectory from the rollout runner: equal-length token ids, action mask and logprobs."""

    index: int = Field(ge=0, le=MAX_SUB_TRAJECTORY_INDEX)
    token_ids: list[Annotated[int, Field(ge=0, le=TOKEN_ID_MAX)]] = Field(
        min_length=1, max_length=MAX_SUB_TRAJECTORY_TOKENS
    )
    action_mask: list[Literal[0, 1]] = Field(min_length=1, max_length=MAX_SUB_TRAJECTORY_TOKENS)
    logprobs: list[float] = Field(min_length=1, max_length=MAX_SUB_TRAJECTORY_TOKENS)
    policy_version: str | None = Field(None, min_length=1, max_length=200)
    trainable: bool = True
    version_spans: list[tuple[int, int, Annotated[str, Field(min_length=1, max_length=200)]]] | None = Field(
        None,
        max_length=MAX_VERSION_SPANS,
        description="[start, end, policy version] of each generated token span (end exclusive)",
    )

    @field_validator("logprobs")
    @classmethod
    def _finite(cls, values: list[float]) -> list[float]:
        if not all(math.isfinite(v) for v in values):
            raise ValueError("logprobs must be finite numbers")
        return values

    @model_validator(mode="after")
    def _same_length(self) -> SubTrajectoryUpload:
        lengths = {len(self.token_ids), len(self.action_mask), len(self.logprobs)}
        if len(lengths) != 1:
            raise ValueError(
                f"token_ids ({len(self.token_ids)}), action_mask ({len(self.action_mask)}) and "
                f"logprobs ({len(self.logprobs)}) must have the same length"
            )
        previous_end = 0
        for start, end, _ in self.version_spans or []:
            if not previous_end <= start < end <= len(self.token_ids):
                raise ValueError(
                    f"version span [{start}, {end}) must be non-empty, in order, non-overlapping and "
                    f"inside the {len(self.token_ids)} tokens"
                )
            previous_end = end
        return self


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
    answer: ToolAnswerBody = Field(description="What the agent was shown (the decoy when was_decoy)")
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
        "answer": ToolAnswerBody(
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
