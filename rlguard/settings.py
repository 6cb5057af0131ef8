"""The one typed settings object, read from ``RLGUARD_*`` environment variables.

Nested sections use ``__``: ``RLGUARD_SANDBOX__WARM_POOL_SIZE=8``,
``RLGUARD_GUARD__JUDGE__BASE_URL=http://127.0.0.1:8001/v1``. Flat names cover what operators set
most: ``RLGUARD_DATABASE_URL``, ``RLGUARD_ADMIN_TOKEN``, ``RLGUARD_DOCKER_HOST``.
"""

from functools import lru_cache
from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from guard.settings import GuardSettings
from rlguard.gateway.settings import GatewaySettings
from rollout.settings import RolloutSettings
from sandbox.settings import SandboxSettings
from trainer.settings import TrainerSettings


def _default_state_dir() -> Path:
    return Path.cwd() / ".rlguard"


class Settings(BaseSettings):
    """Everything rlguard reads from its environment, typed and validated once."""

    model_config = SettingsConfigDict(env_prefix="RLGUARD_", env_nested_delimiter="__", extra="ignore")

    instance: str = Field("default", description="Names this rlguard instance on its containers' labels")
    state_dir: Path = Field(default_factory=_default_state_dir, description="Database, tokens, runs")
    database_url: str = Field("", description="SQLAlchemy URL; empty means SQLite in state_dir")
    admin_token: SecretStr | None = Field(None, description="Admin bearer token; generated when unset")
    docker_host: str | None = Field(None, description="Docker engine URL; default: DOCKER_HOST or socket")
    sandbox: SandboxSettings = Field(default_factory=SandboxSettings)
    guard: GuardSettings = Field(default_factory=GuardSettings)
    gateway: GatewaySettings = Field(default_factory=GatewaySettings)
    rollout: RolloutSettings = Field(default_factory=RolloutSettings)
    trainer: TrainerSettings = Field(default_factory=TrainerSettings)

    @property
    def resolved_database_url(self) -> str:
        """The database URL in force: the configured one, or SQLite under ``state_dir``."""
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.state_dir / 'rlguard.db').resolve()}"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """Process-wide settings, read once from the environment."""
    return Settings()
