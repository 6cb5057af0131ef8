"""The one typed settings object, read from ``RLGUARD_*`` environment variables.

Composed of each package's share of the environment (``SandboxEnv``, ``GuardEnv``, ``StoreEnv``,
``RolloutEnv``, ``TrainerEnv``) plus the gateway's own. Nested sections use ``__``:
``RLGUARD_SANDBOX__WARM_POOL_SIZE=8``, ``RLGUARD_GUARD__JUDGE__BASE_URL=http://127.0.0.1:8001/v1``.
Flat names cover what operators set most: ``RLGUARD_DATABASE_URL``, ``RLGUARD_ADMIN_TOKEN``,
``RLGUARD_DOCKER_HOST``. Library code receives its section as an argument; only this package and
the packages' ``cli.py`` read the environment.
"""

from functools import lru_cache
from typing import Literal

from pydantic import BaseModel, Field, SecretStr
from pydantic_settings import SettingsConfigDict

from guard.settings import GuardEnv
from rollout.settings import RolloutEnv
from sandbox.settings import SandboxEnv
from store.settings import StoreEnv
from trainer.settings import TrainerEnv


class GatewaySettings(BaseModel):
    """Where the gateway listens, which tasks it serves and how long episodes may live."""

    host: str = Field("127.0.0.1", description="Listen address")
    port: int = Field(8765, gt=0, lt=65536, description="Listen port")
    max_body_bytes: int = Field(1024 * 1024, gt=0, description="Larger request bodies get 413")
    max_trajectory_body_bytes: int = Field(
        32 * 1024 * 1024, gt=0, description="Body limit of sub-trajectory uploads (token ids + logprobs)"
    )
    episode_idle_timeout_s: float = Field(600.0, gt=0, description="Episodes idle this long time out")
    episode_max_duration_s: float = Field(3600.0, gt=0, description="Episodes older than this time out")
    suites: list[str] = Field(
        default_factory=lambda: ["builtin"], description="Task suites served: built-in names or directories"
    )
    patch_review: Literal["zero", "flag"] = Field(
        "zero",
        description="What a final patch the guard finds tampering does to the reward: zero it, or flag it",
    )


class Settings(SandboxEnv, GuardEnv, StoreEnv, RolloutEnv, TrainerEnv):
    """Everything rlguard reads from its environment, typed and validated once."""

    model_config = SettingsConfigDict(env_prefix="RLGUARD_", env_nested_delimiter="__", extra="ignore")

    admin_token: SecretStr | None = Field(None, description="Admin bearer token; generated when unset")
    gateway: GatewaySettings = Field(default_factory=GatewaySettings)


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """Process-wide settings, read once from the environment."""
    return Settings()
