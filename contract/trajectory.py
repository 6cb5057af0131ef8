"""The trajectory wire types: how a rollout hands a sub-trajectory to the gateway, and why an
episode ended (DESIGN.md "Trajectory record").

The trainer reads the end reason to decide whether an episode's last value is terminal (it
ended on its own, or was cut by a limit: the graded reward stands) or never trained (the
infrastructure failed); the upload's limits bound what one request may make the store hold.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

MAX_SUB_TRAJECTORY_TOKENS = 262_144
MAX_SUB_TRAJECTORY_INDEX = 100_000
MAX_VERSION_SPANS = 4096
TOKEN_ID_MAX = 2**31 - 1

EndReason = Literal["submitted", "max_turns", "max_tokens", "timeout", "context_full", "error"]
LIMIT_END_REASONS: frozenset[str] = frozenset({"max_turns", "max_tokens", "timeout", "context_full"})


class SubTrajectoryUpload(BaseModel):
    """One sub-trajectory from the rollout runner: equal-length token ids, action mask and logprobs."""

    model_config = ConfigDict(extra="forbid")

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
