"""Guard and judge settings (plain pydantic models embedded in ``rlguard.settings.Settings``)."""

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_PROTECTED_PATHS: tuple[str, ...] = (
    "/grader",
    "/reference",
    "/solution",
    "/hidden",
    "**/hidden_tests/**",
    "**/.hidden/**",
    "/var/run/docker.sock",
    "/run/docker.sock",
    "/run/containerd/containerd.sock",
    "/run/podman/podman.sock",
    "/proc/*/root",
)


class JudgeSettings(BaseModel):
    """Stage 2: an LLM judge behind any OpenAI-compatible endpoint. Disabled when base_url is empty."""

    base_url: str = Field("", description="OpenAI-compatible base URL, e.g. http://127.0.0.1:8001/v1")
    model: str = Field("judge", description="Model name sent to the endpoint")
    api_key: SecretStr = Field(SecretStr("EMPTY"), description="API key for the endpoint")
    timeout_s: float = Field(10.0, gt=0)
    max_retries: int = Field(2, ge=0)
    max_concurrency: int = Field(8, gt=0)
    cache_size: int = Field(4096, ge=0)
    fail_mode: Literal["closed", "open"] = Field(
        "closed", description="closed: decoy when the judge is down; open: allow and flag"
    )
    context_turns: int = Field(4, ge=0, description="Trajectory turns shown to the judge")
    backoff_s: float = Field(0.25, ge=0, description="First retry delay; doubles on each retry")
    max_tokens: int = Field(256, gt=0, description="Cap on the judge's answer length")
    min_confidence: float = Field(
        0.5, ge=0, le=1, description="A cheat verdict below this confidence is flagged, not decoyed"
    )
    breaker_failures: int = Field(
        5, ge=0, description="Consecutive failed reviews that pause the judge (0: never pause)"
    )
    breaker_cooldown_s: float = Field(
        30.0, gt=0, description="While paused, escalations get the fail mode at once instead of waiting"
    )
    max_prompt_chars: int = Field(
        12000, gt=0, description="Cap on the prompt size (long calls and turns are cut in the middle)"
    )


class GuardSettings(BaseModel):
    """Stage 1 rules: the built-in pack plus user YAML files, and the protected paths."""

    enabled: bool = True
    rule_files: list[Path] = Field(default_factory=list, description="Extra YAML rule files")
    protected_paths: list[str] = Field(default_factory=lambda: list(DEFAULT_PROTECTED_PATHS))
    judge: JudgeSettings = Field(default_factory=JudgeSettings)


class GuardEnv(BaseSettings):
    """The guard's share of the ``RLGUARD_*`` environment (``RLGUARD_GUARD__...``)."""

    model_config = SettingsConfigDict(env_prefix="RLGUARD_", env_nested_delimiter="__", extra="ignore")

    guard: GuardSettings = Field(default_factory=GuardSettings)
