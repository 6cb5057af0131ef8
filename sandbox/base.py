"""The sandbox interface: one contract, several backends (Docker today).

Every backend gives the same operations with the same limits and the same answers, so the gateway
and the grader never know which engine runs the container.
"""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path

from sandbox.settings import SandboxLimits


class SandboxError(Exception):
    """A sandbox operation failed for a reason the caller should report (bad path, engine down)."""


class PathEscapeError(SandboxError):
    """A file operation named a path outside /workspace (through ``..``, an absolute path or a symlink)."""


class EngineUnavailable(SandboxError):
    """The engine holding a sandbox stopped answering (it died, or its host or network did).

    An infrastructure failure, never the agent's doing: the sandbox and what it held are lost to
    its episode, which ends as ``infra_error`` (recorded, never trained). Raised only after the
    engine itself failed to answer a ping, so an agent that kills its own runner does not cause it.
    """

    def __init__(self, engine: str, reason: str) -> None:
        super().__init__(f"engine {engine!r} stopped answering: {reason}")
        self.engine = engine


class SandboxGone(SandboxError):
    """The container to attach to is no longer there (removed, stopped, or never this instance's)."""


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
    #: Grading containers: a second uid, the supervisor's, owns ``/workspace`` itself and unpacks
    #: ``load_supervisor_archive`` and runs ``exec_supervisor`` commands. Once the supervisor has made
    #: a directory sticky and writable by all (mode 1777), the agent's uid adds its own entries there
    #: but cannot change, remove or rename what the supervisor wrote: the kernel, not the code under
    #: test, keeps a grader's files as the grader left them. No workspace is loaded at creation.
    supervised: bool = False


class Sandbox(abc.ABC):
    """A started, hardened container owned by one episode; destroyed after use, never reused."""

    id: str
    spec: SandboxSpec
    #: The name of the engine that holds it (one of a fleet's engines; stored with the episode so
    #: another gateway can find the sandbox again).
    engine: str = ""

    @abc.abstractmethod
    async def exec(self, command: str, timeout_s: float | None = None) -> ExecResult:
        """Run ``command`` with ``bash -lc``-free ``bash -c`` semantics in /workspace."""

    async def exec_supervisor(self, command: str, timeout_s: float | None = None) -> ExecResult:
        """Run ``command`` as the supervisor's uid (``SandboxSpec.supervised`` sandboxes only).

        The default refuses: a backend without a second uid cannot keep grader files out of the
        agent's reach, and a grader must know that rather than silently share one uid."""
        raise SandboxError("this sandbox has no supervisor uid (SandboxSpec.supervised)")

    async def load_supervisor_archive(self, archive: bytes) -> None:
        """Unpack a tar archive at ``/`` as the supervisor's uid, permission bits exactly as archived
        (sticky bits included); members may lie only under ``workspace/`` and ``tmp/``, and be plain
        files or directories (``SandboxSpec.supervised`` sandboxes only)."""
        raise SandboxError("this sandbox has no supervisor uid (SandboxSpec.supervised)")

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


#: Asked by gc with the ids of containers it is about to remove as orphans; answers those still
#: wanted (a running episode names them: its lease may be claimed by another gateway, which then
#: attaches to the sandbox and grades it).
RetainHook = Callable[[Collection[str]], Awaitable[Collection[str]]]


class SandboxBackend(abc.ABC):
    """Creates sandboxes and cleans up after crashed owners."""

    #: See :data:`RetainHook`; None: every orphan goes.
    retain: RetainHook | None = None

    @abc.abstractmethod
    async def create(self, spec: SandboxSpec) -> Sandbox:
        """Start a hardened sandbox with the workspace copied into /workspace."""

    @abc.abstractmethod
    async def attach(self, sandbox_id: str, spec: SandboxSpec, engine: str | None = None) -> Sandbox:
        """Take over a running rlguard sandbox that another process started (its owner died; the
        caller holds its episode's lease now). ``engine`` names the engine that holds it where a
        backend has several. Raises :class:`SandboxGone` when it is no longer there,
        :class:`EngineUnavailable` when its engine does not answer. The sandbox is then this
        backend's, destroyed like its own."""

    @abc.abstractmethod
    async def gc(self, instance: str | None = None) -> int:
        """Remove this instance's containers that no live sandbox owns; return how many.
        ``instance``: another instance's instead, whose gateway is known dead (its leases lapsed):
        only containers whose owner process is certainly gone are removed, as for this one's."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Destroy every sandbox this backend still owns."""
