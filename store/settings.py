"""The store's share of the ``RLGUARD_*`` environment: where the state and the database live."""

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


def _default_state_dir() -> Path:
    return Path.cwd() / ".rlguard"


class StoreEnv(BaseSettings):
    """``RLGUARD_STATE_DIR`` and ``RLGUARD_DATABASE_URL`` (part of ``rlguard.settings.Settings``)."""

    model_config = SettingsConfigDict(env_prefix="RLGUARD_", env_nested_delimiter="__", extra="ignore")

    state_dir: Path = Field(default_factory=_default_state_dir, description="Database, tokens, runs")
    database_url: str = Field("", description="SQLAlchemy URL; empty means SQLite in state_dir")

    @property
    def resolved_database_url(self) -> str:
        """The database URL in force: the configured one, or SQLite under ``state_dir``.

        The state directory is rlguard's own, so it is made on first use; the directory of an
        explicitly configured SQLite URL is not (a typo must fail, not start an empty database)."""
        if self.database_url:
            return self.database_url
        self.state_dir.mkdir(parents=True, exist_ok=True)
        return f"sqlite:///{(self.state_dir / 'rlguard.db').resolve()}"
