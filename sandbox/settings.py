"""Sandbox limits and engine settings.

A plain pydantic model (no environment reading here): the top-level ``rlguard.settings.Settings``
embeds it, so ``RLGUARD_SANDBOX__MEMORY=1g`` overrides a field, and a task may override any limit.
"""

from pydantic import BaseModel, Field


class SandboxLimits(BaseModel):
    """Resource limits for one sandbox container; every field may be overridden per task."""

    memory: str = Field("1g", description="Memory limit (swap is set equal: no swap use)")
    cpus: float = Field(1.0, gt=0, description="CPU quota in cores")
    pids: int = Field(256, gt=0, description="Maximum processes/threads in the container")
    workspace_size: str = Field("512m", description="tmpfs size cap of /workspace")
    tmp_size: str = Field("256m", description="tmpfs size cap of /tmp")
    nofile: int = Field(1024, gt=0, description="Open-file ulimit")
    fsize_bytes: int = Field(256 * 1024 * 1024, gt=0, description="Largest file a process may write")
    exec_timeout_s: float = Field(60.0, gt=0, description="Default command timeout")
    output_cap_bytes: int = Field(64 * 1024, gt=0, description="Output kept per call (head and tail)")


class SandboxSettings(BaseModel):
    """Which image, how many warm sandboxes, and the default limits."""

    image: str = Field("", description="Sandbox image; empty means rlguard/sandbox-python:<version>")
    warm_pool_size: int = Field(4, ge=0, description="Pre-started sandboxes kept per (image, limits)")
    gc_interval_s: float = Field(60.0, gt=0, description="How often orphaned containers are removed")
    limits: SandboxLimits = Field(default_factory=SandboxLimits)
