"""Rollout and policy settings (embedded in ``rlguard.settings.Settings`` as ``rollout``)."""

from pydantic import BaseModel, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class PolicyServerSettings(BaseModel):
    """``rlguard policy serve``: where it listens and the limits it enforces on each request."""

    host: str = Field("127.0.0.1", description="Listen address (loopback by default)")
    port: int = Field(8000, gt=0, lt=65536)
    max_tokens_limit: int = Field(4096, gt=0, description="Largest max_tokens a request may ask for")
    max_prompt_tokens: int = Field(16384, gt=0, description="Longest prompt accepted (400 beyond)")
    max_batch: int = Field(8, gt=0, le=256, description="Requests generated together in one batch")
    max_batch_tokens: int = Field(
        65536, gt=0, description="Padded prompt tokens a batch may hold (a longer prompt goes alone)"
    )
    control_token: SecretStr | None = Field(
        None,
        description="Bearer token of the reload endpoints (the trainer's weight sync sends it); unset: "
        "they refuse everyone. The loop makes one per run. Give it in the environment, never on argv",
    )
    reload_roots: list[str] = Field(
        default_factory=list,
        description="Directories a reload may read from (a run's checkpoint folder); nothing outside",
    )


class RolloutSettings(BaseModel):
    """How episodes are run against a policy."""

    gateway_url: str = Field("http://127.0.0.1:8765", description="The gateway the runner calls")
    concurrency: int = Field(8, gt=0, description="Episodes run at once")
    max_turns: int = Field(30, gt=0)
    max_tokens: int = Field(16384, gt=0, description="Total generated tokens per episode")
    max_tokens_per_turn: int = Field(512, gt=0, description="max_tokens of each generation")
    context_budget_tokens: int = Field(4096, gt=0, description="Compaction starts past this context")
    keep_recent_turns: int = Field(2, ge=0, description="Turns kept verbatim after a compaction")
    episode_timeout_s: float = Field(900.0, gt=0, description="Wall-clock budget of one episode")
    temperature: float = Field(1.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    policy: PolicyServerSettings = Field(default_factory=PolicyServerSettings)


class RolloutEnv(BaseSettings):
    """The rollout layer's share of the ``RLGUARD_*`` environment (``RLGUARD_ROLLOUT__...``)."""

    model_config = SettingsConfigDict(env_prefix="RLGUARD_", env_nested_delimiter="__", extra="ignore")

    rollout: RolloutSettings = Field(default_factory=RolloutSettings)
