"""The sandbox interface: one contract, several backends (Docker today).

Every backend gives the same operations with the same limits and the same answers, so the gateway
and the grader never know which engine runs the container.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from pathlib import Path

from sandbox.settings import SandboxLimits


class SandboxError(Exception):
    """A sandbox operation failed for a reason the caller should report (bad path, engine down)."""


class PathEscapeError(SandboxError):
    """A file operation named a path outside /workspace (through ``..``, an absolute path or a symlink)."""


@dataclass(frozen=True)
class ExecResult:
    """The answer to one command: merged stdout+stderr (capped, head and tail kept)."""

    output: str
    exit_code: int
    truncated: bool = False
    timed_out: bool = False
    duration_ms: float = 0.0


@dataclass(frozen=True)
class DirEntry:
    """One entry of a directory listing."""

    name: str
    kind: str  # "file" | "dir" | "symlink" | "other"
    size: int


@dataclass(frozen=True)
class SandboxSpec:
    """What to start: image, limits, labels. ``workspace`` is a directory or a tar archive's bytes."""

    image: str
    limits: SandboxLimits = field(default_factory=SandboxLimits)
    episode_id: str | None = None
    workspace: Path | bytes | None = None


class Sandbox(abc.ABC):
    """A started, hardened container owned by one episode; destroyed after use, never reused."""

    id: str
    spec: SandboxSpec

    @abc.abstractmethod
    async def exec(self, command: str, timeout_s: float | None = None) -> ExecResult:
        """Run ``command`` with ``bash -lc``-free ``bash -c`` semantics in /workspace."""

    @abc.abstractmethod
    async def read_file(self, path: str, max_bytes: int | None = None) -> bytes:
        """Read a file under /workspace (relative paths are relative to /workspace)."""

    @abc.abstractmethod
    async def write_file(self, path: str, data: bytes) -> None:
        """Write a file under /workspace, creating parent directories."""

    @abc.abstractmethod
    async def list_dir(self, path: str = ".") -> list[DirEntry]:
        """List a directory under /workspace."""

    @abc.abstractmethod
    async def export_workspace(self) -> bytes:
        """The whole /workspace as a tar archive (for grading in a fresh container)."""

    @abc.abstractmethod
    async def destroy(self) -> None:
        """Remove the container and everything it holds. Safe to call twice."""


class SandboxBackend(abc.ABC):
    """Creates sandboxes and cleans up after crashed owners."""

    @abc.abstractmethod
    async def create(self, spec: SandboxSpec) -> Sandbox:
        """Start a hardened sandbox with the workspace copied into /workspace."""

    @abc.abstractmethod
    async def gc(self) -> int:
        """Remove this instance's containers that no live sandbox owns; return how many."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Destroy every sandbox this backend still owns."""
