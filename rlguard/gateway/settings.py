"""Gateway settings (embedded in ``rlguard.settings.Settings`` as ``gateway``)."""

from pydantic import BaseModel, Field


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
