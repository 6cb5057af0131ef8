"""Sandbox limits and engine settings.

A plain pydantic model (no environment reading here): the top-level ``rlguard.settings.Settings``
embeds it, so ``RLGUARD_SANDBOX__LIMITS__MEMORY=2g`` overrides a field, and a task may override any
limit. Sizes are Docker-style strings (``512m``, ``1g``); they are checked here so a bad limit is one
clear error before any container starts.
"""

import re
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from sandbox.engines import EngineConfig, engine_from_value

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)
_UNIT = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(text: str) -> int:
    """Bytes in a Docker-style size (``"512m"`` -> 536870912); ``ValueError`` when malformed."""
    match = _SIZE.match(str(text))
    if not match:
        raise ValueError(f"not a size: {text!r} (use e.g. 512m, 1g)")
    return int(float(match.group(1)) * _UNIT[match.group(2).lower()])


class SandboxLimits(BaseModel):
    """Resource limits for one sandbox container; every field may be overridden per task."""

    memory: str = Field("1g", description="Memory limit (swap is set equal: no swap use)")
    cpus: float = Field(1.0, gt=0, le=256, allow_inf_nan=False, description="CPU quota in cores")
    pids: int = Field(256, ge=16, description="Maximum processes/threads in the container")
    workspace_size: str = Field("512m", description="tmpfs size cap of /workspace (counts against memory)")
    tmp_size: str = Field("128m", description="tmpfs size cap of /tmp (counts against memory)")
    nofile: int = Field(1024, ge=64, description="Open-file ulimit")
    fsize_bytes: int = Field(256 * 1024 * 1024, gt=0, description="Largest file a process may write")
    exec_timeout_s: float = Field(
        60.0, gt=0, le=86400, allow_inf_nan=False, description="Default command timeout (seconds)"
    )
    output_cap_bytes: int = Field(64 * 1024, ge=1024, le=64 * 1024 * 1024, description="Output kept per call")
    transfer_max_bytes: int = Field(
        64 * 1024 * 1024, ge=1024, description="Largest workspace archive or file moved in or out"
    )

    @field_validator("memory", "workspace_size", "tmp_size")
    @classmethod
    def _check_size(cls, value: str) -> str:
        if parse_size(value) < 1 << 20:
            raise ValueError(f"size {value!r} is below 1m")
        return value

    @model_validator(mode="after")
    def _tmpfs_fits_in_memory(self) -> "SandboxLimits":
        # tmpfs pages are charged to the container's memory cgroup: full disks must leave room to run.
        tmpfs = parse_size(self.workspace_size) + parse_size(self.tmp_size)
        memory = parse_size(self.memory)
        if tmpfs + (64 << 20) > memory:
            raise ValueError(
                f"workspace_size + tmp_size ({tmpfs >> 20} MiB) must stay 64 MiB below memory "
                f"({memory >> 20} MiB): tmpfs pages count against the memory limit"
            )
        return self

    @property
    def memory_bytes(self) -> int:
        """The memory limit in bytes."""
        return parse_size(self.memory)


class SandboxSettings(BaseModel):
    """Which image, how many warm sandboxes, and the default limits."""

    image: str = Field("", description="Sandbox image; empty means rlguard/sandbox-python:<version>")
    warm_pool_size: int = Field(4, ge=0, le=256, description="Pre-started sandboxes kept per (image, limits)")
    gc_interval_s: float = Field(60.0, gt=0, description="How often orphaned containers are removed")
    seccomp: Literal["auto", "engine", "rlguard"] = Field(
        "rlguard",
        description=(
            "rlguard: rlguard's own profile (denies io_uring, AF_VSOCK, namespaces, ...); engine: the "
            "engine's default; auto: the engine's default when it is in force, else rlguard's"
        ),
    )
    runtime: Literal["runc", "runsc"] = Field(
        "runc",
        description=(
            "OCI runtime of every sandbox and grading container: runc (Linux namespaces, the engine's "
            "default) or runsc (gVisor: a user-space kernel between the agent and the host, a second "
            "wall; must be registered with the engine, scripts/ensure_runsc.sh). See docs/sandbox.md"
        ),
    )
    agent_uid_min: int = Field(
        2_000_000_000,
        ge=1000,
        le=2_147_483_646,
        description="Lowest agent uid; each sandbox draws its own (no host account may be in the range)",
    )
    agent_uid_max: int = Field(2_099_999_999, ge=1000, le=2_147_483_646, description="Highest agent uid")
    engine_concurrency: int = Field(16, ge=1, le=256, description="Docker API calls in flight at once")
    image_build: Literal["auto", "dockerfile", "offline"] = Field(
        "auto", description="How a missing rlguard image is built"
    )
    limits: SandboxLimits = Field(default_factory=SandboxLimits)
    engines: list[EngineConfig] = Field(
        default_factory=list,
        description=(
            "The Docker engines sandboxes are spread over (JSON: engine URLs or objects with url, name, "
            "tls, max_sandboxes, warm_pool_size, runtime); empty: the one engine of docker_host"
        ),
    )

    @field_validator("engines", mode="before")
    @classmethod
    def _engine_urls(cls, value: Any) -> Any:
        return [engine_from_value(item) for item in value] if isinstance(value, list) else value

    @model_validator(mode="after")
    def _uid_range(self) -> "SandboxSettings":
        if self.agent_uid_max < self.agent_uid_min:
            raise ValueError("agent_uid_max must not be below agent_uid_min")
        names = [engine.name for engine in self.engines]
        if len(set(names)) != len(names):
            raise ValueError("engines: two engines have one name (names must be unique)")
        return self


class SandboxEnv(BaseSettings):
    """The sandbox layer's share of the ``RLGUARD_*`` environment (part of ``rlguard.settings.Settings``).

    Read on its own by ``rlguard sandbox ...``; the top-level settings inherit it, so both read the
    same variables the same way.
    """

    model_config = SettingsConfigDict(env_prefix="RLGUARD_", env_nested_delimiter="__", extra="ignore")

    instance: str = Field("default", description="Names this rlguard instance on its containers' labels")
    docker_host: str | None = Field(None, description="Docker engine URL; default: DOCKER_HOST or socket")
    sandbox: SandboxSettings = Field(default_factory=SandboxSettings)
