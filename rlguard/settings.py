"""The one typed settings object, read from ``RLGUARD_*`` environment variables.

Composed of each layer's share of the environment (``GatewayEnv``, which itself holds the sandbox,
guard and store sections, plus ``RolloutEnv`` and ``TrainerEnv``). Nested sections use ``__``:
``RLGUARD_SANDBOX__WARM_POOL_SIZE=8``, ``RLGUARD_GUARD__JUDGE__BASE_URL=http://127.0.0.1:8001/v1``.
Flat names cover what operators set most: ``RLGUARD_DATABASE_URL``, ``RLGUARD_ADMIN_TOKEN``,
``RLGUARD_DOCKER_HOST``. The command line builds it once and hands each command the sections it
needs; library code never reads the environment.
"""

from functools import lru_cache

from pydantic import ValidationError
from pydantic_settings import SettingsConfigDict, SettingsError

from gateway.settings import GatewayEnv
from rlguard.errors import RlguardError
from rollout.settings import RolloutEnv
from trainer.settings import TrainerEnv


class Settings(GatewayEnv, RolloutEnv, TrainerEnv):
    """Everything rlguard reads from its environment, typed and validated once."""

    model_config = SettingsConfigDict(env_prefix="RLGUARD_", env_nested_delimiter="__", extra="ignore")


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """Process-wide settings, read once from the environment; a bad value is one clear line."""
    try:
        return Settings()
    except ValidationError as exc:
        raise RlguardError(describe_invalid_settings(exc)) from None
    except SettingsError as exc:  # a JSON-valued variable (RLGUARD_SANDBOX__ENGINES) that is not JSON
        raise RlguardError(f"bad setting: {exc} (a list or object must be JSON)") from None


def describe_invalid_settings(exc: ValidationError) -> str:
    """``bad setting RLGUARD_GATEWAY__PORT: Input should be less than 65536`` (the first problem)."""
    first = exc.errors()[0]
    name = "RLGUARD_" + "__".join(str(part) for part in first["loc"]).upper()
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"bad setting {name}: {first['msg']}{more}"
