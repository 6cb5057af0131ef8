"""Rollout and policy settings (embedded in ``rlguard.settings.Settings`` as ``rollout``)."""

from pydantic import BaseModel, Field


class RolloutSettings(BaseModel):
    """How episodes are run against a policy."""

    gateway_url: str = Field("http://127.0.0.1:8765", description="The gateway the runner calls")
    policy_base_url: str = Field("http://127.0.0.1:8000/v1", description="OpenAI-compatible policy")
    concurrency: int = Field(8, gt=0, description="Episodes run at once")
    max_turns: int = Field(30, gt=0)
    max_tokens: int = Field(16384, gt=0, description="Total generated tokens per episode")
    context_budget_tokens: int = Field(4096, gt=0, description="Compaction starts past this context")
