"""One sandbox container as the rest of rlguard sees it: commands and file operations, one at a time.

Requests go through the in-sandbox runner (``sandbox.runner_protocol``), started on first use over
the exec attach stream (see ``sandbox.attach`` for why not a socket file) and restarted, with every
agent process killed, whenever it dies, hangs or a caller gives up mid-request. Images without
python3 fall back to one ``docker exec`` per command (``sandbox.docker_exec``). A failure is judged
by pinging the engine first: a dead engine raises ``EngineUnavailable``, anything else is the
command's own outcome.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import time
from typing import TYPE_CHECKING, Any, Protocol

from sandbox import docker_exec, runner_protocol
from sandbox.attach import AttachedExec, ChannelClosed
from sandbox.base import DirEntry, EngineUnavailable, ExecResult, Sandbox, SandboxError, SandboxSpec
from sandbox.hardening import check_supervisor_archive
from sandbox.paths import WORKSPACE, workspace_path
from sandbox.runner_protocol import RUNNER_LAUNCHERS, RUNNER_PROGRAM

if TYPE_CHECKING:
    import docker

    from sandbox.endpoint import EngineEndpoint
    from sandbox.engine_health import EngineHealth
    from sandbox.settings import SandboxLimits

RUNNER_GRACE_S = 5.0
CONTROL_TIMEOUT_S = 60.0
MAX_COMMAND_CHARS = 100_000  # one argv string may not exceed 128 KiB (MAX_ARG_STRLEN)
RUNNER_KILLED_NOTE = "[rlguard: the sandbox's command runner was killed; this command's result is lost]"


class SandboxHost(Protocol):
    """What a sandbox uses of the backend that made it (``DockerBackend``, which imports this module)."""

    name: str
    fast_path: bool
    #: Per image, the index of the first runner launcher that works (``len`` means none does).
    launchers: dict[str, int]
    client: docker.DockerClient
    endpoint: EngineEndpoint
    health: EngineHealth

    async def call(self, fn: Any, *args: Any, **kwargs: Any) -> Any: ...

    async def remove(self, container_id: str) -> None: ...


class DockerSandbox(Sandbox):
    """One hardened container; requests go one at a time through its runner."""

    def __init__(
        self,
        backend: SandboxHost,
        container_id: str,
        spec: SandboxSpec,
        uid: int,
        supervisor_uid: int | None = None,
    ) -> None:
        self.id = container_id
        self.spec = spec
        #: The agent's uid in this sandbox (its own; see ``sandbox.hardening.host_config_kwargs``).
        self.uid = uid
        self.user = f"{uid}:{uid}"
        #: The supervisor's uid (``spec.supervised`` only): owns /workspace, runs ``exec_supervisor``.
        self.supervisor_uid = supervisor_uid
        self._backend = backend
        self._lock = asyncio.Lock()
        self._runner: AttachedExec | None = None
        self._fast = backend.fast_path
        self._destroyed = False
        self._abandoned = False
        #: Why the sandbox is lost (its engine stopped answering); every operation then raises.
        self._lost: str | None = None

    @property
    def engine(self) -> str:  # type: ignore[override]
        """The name of the engine holding this sandbox."""
        return self._backend.name

    @property
    def limits(self) -> SandboxLimits:
        """The limits this sandbox was started with."""
        return self.spec.limits

    @property
    def uses_runner(self) -> bool:
        """True while commands go through the in-sandbox runner (False: one docker exec each)."""
        return self._fast

    # -- the runner ------------------------------------------------------------------------------

    async def _start_runner(self) -> AttachedExec:
        """Start the runner with the first launcher the image supports (bash's ``exec -a``, else plain)."""
        first = self._backend.launchers.get(self.spec.image, 0)
        for index in range(first, len(RUNNER_LAUNCHERS)):
            runner = await self._try_launcher(RUNNER_LAUNCHERS[index])
            if runner is not None:
                self._backend.launchers[self.spec.image] = index
                return runner
        self._backend.launchers[self.spec.image] = len(RUNNER_LAUNCHERS)
        raise _NoInterpreter("the sandbox image has no python3: file operations are unavailable")

    async def _try_launcher(self, argv: list[str]) -> AttachedExec | None:
        import docker.errors

        api = self._backend.client.api
        try:
            created = await self._backend.call(
                api.exec_create,
                self.id,
                argv,
                stdin=True,
                stdout=True,
                stderr=True,
                user=self.user,
                workdir=WORKSPACE,
                environment={"RLGUARD_RUNNER": RUNNER_PROGRAM},
            )
        except docker.errors.DockerException as exc:
            raise SandboxError(f"sandbox {self.id[:12]} is not running: {exc}") from exc
        try:
            runner = await AttachedExec.start(self._backend.endpoint, api.api_version, created["Id"])
        except ConnectionError as exc:
            raise await self._backend.health.failure(exc) from exc
        try:
            await runner_protocol.roundtrip(runner, {"op": "ping"}, CONTROL_TIMEOUT_S, 4096)
        except (ChannelClosed, TimeoutError) as exc:
            runner.close()
            for _ in range(20):
                info = await self._backend.call(api.exec_inspect, created["Id"])
                if not info.get("Running"):
                    break
                await asyncio.sleep(0.05)
            if info.get("ExitCode") in (126, 127):
                return None
            raise SandboxError(f"sandbox runner did not start: {runner.stderr_tail[-300:]!r}") from exc
        return runner

    async def _request(self, request: dict, timeout: float, max_line: int) -> dict:
        """Send one request through the runner (starting it if needed); raise on refusal."""
        if self._lost is not None:
            raise EngineUnavailable(self.engine, self._lost)
        if self._destroyed:
            raise SandboxError("sandbox was destroyed")
        if self._abandoned:
            self._abandoned = False
            await self._reset_runner()
        if self._runner is None:
            self._runner = await self._start_runner()
        try:
            reply = await runner_protocol.roundtrip(self._runner, request, timeout, max_line)
        except (ChannelClosed, TimeoutError):
            await self._reset_runner()
            raise
        except asyncio.CancelledError:
            # The caller gave up mid-request: the answer would arrive late and confuse the next
            # request, and the command may still run. Drop the runner now (no await while being
            # cancelled) and kill what is left before the next request starts a new one.
            if self._runner is not None:
                self._runner.close()
                self._runner = None
            self._abandoned = True
            raise
        if not reply["ok"]:
            raise runner_protocol.refusal(reply)
        return reply

    async def _file_request(self, request: dict, max_line: int) -> dict:
        """A file operation through the runner; a runner that does not answer is a SandboxError."""
        async with self._lock:
            try:
                return await self._request(request, CONTROL_TIMEOUT_S, max_line)
            except (TimeoutError, ChannelClosed) as exc:
                down = await self._backend.health.unavailable()
                if down is not None:
                    raise down from exc
                if isinstance(exc, TimeoutError):
                    message = f"sandbox runner did not answer within {CONTROL_TIMEOUT_S:g}s"
                    raise SandboxError(message) from None
                raise

    async def _reset_runner(self) -> None:
        """Drop a dead or stuck runner and kill every agent process, so the next call starts clean."""
        if self._runner is not None:
            self._runner.close()
            self._runner = None
        with contextlib.suppress(Exception):
            await self._backend.call(
                self._backend.client.api.exec_start,
                (
                    await self._backend.call(
                        self._backend.client.api.exec_create, self.id, ["kill", "-9", "-1"], user=self.user
                    )
                )["Id"],
            )

    async def warm_up(self) -> None:
        """Start the runner now rather than on first use (or learn that the image has no python3)."""
        async with self._lock:
            if self._fast and self._runner is None and not self._destroyed:
                try:
                    self._runner = await self._start_runner()
                except _NoInterpreter:
                    self._fast = False

    # -- operations ------------------------------------------------------------------------------

    async def exec(self, command: str, timeout_s: float | None = None) -> ExecResult:
        timeout = float(timeout_s if timeout_s is not None else self.limits.exec_timeout_s)
        if not 0 < timeout <= 86400:
            raise SandboxError(f"timeout must be in (0, 86400] seconds, got {timeout_s!r}")
        if not isinstance(command, str) or "\0" in command:
            raise SandboxError("command must be a string without NUL bytes")
        if len(command) > MAX_COMMAND_CHARS:
            raise SandboxError(
                f"command of {len(command)} characters exceeds {MAX_COMMAND_CHARS} (the kernel's limit)"
            )
        cap = self.limits.output_cap_bytes
        async with self._lock:
            if not self._fast:
                return await self._exec_via_docker(command, timeout, cap)
            started = time.monotonic()
            request = {"op": "exec", "cmd": command, "timeout": timeout, "cap": cap}
            try:
                reply = await self._request(request, timeout + RUNNER_GRACE_S, 8 * cap + 65536)
            except _NoInterpreter:
                self._fast = False
                return await self._exec_via_docker(command, timeout, cap)
            except TimeoutError as exc:
                if (down := await self._backend.health.unavailable()) is not None:
                    raise down from exc  # the engine hung, not the command
                return ExecResult(
                    output=f"[rlguard: command timed out after {timeout:g}s; every process was killed]",
                    exit_code=124,
                    timed_out=True,
                    duration_ms=(time.monotonic() - started) * 1000,
                )
            except ChannelClosed as exc:
                if (down := await self._backend.health.unavailable()) is not None:
                    raise down from exc  # the engine died under the runner; the agent did not kill it
                return ExecResult(
                    RUNNER_KILLED_NOTE, exit_code=137, duration_ms=(time.monotonic() - started) * 1000
                )
        return runner_protocol.exec_result(reply, cap)

    async def _exec_via_docker(
        self, command: str, timeout: float, cap: int, user: str | None = None
    ) -> ExecResult:
        """The slow path: one ``docker exec`` per command, under coreutils ``timeout``, as ``user``
        (default: the sandbox's agent uid)."""
        import docker.errors

        started = time.monotonic()
        argv = docker_exec.exec_argv(command, timeout)
        api = self._backend.client.api
        try:
            output, truncated, exit_code = await asyncio.wait_for(
                self._backend.call(docker_exec.run_exec, api, self.id, argv, cap, user or self.user),
                timeout + RUNNER_GRACE_S,
            )
        except TimeoutError:
            # A background child kept the output stream open past the deadline: kill everything.
            await self._reset_runner()
            output, truncated, exit_code = "", False, 124
        except docker.errors.DockerException as exc:
            raise SandboxError(f"sandbox {self.id[:12]} is not running: {exc}") from exc
        timed_out = exit_code == 124
        if timed_out:
            output += (
                f"\n[rlguard: command timed out after {timeout:g}s; it and its process group were killed]"
            )
        return ExecResult(output, exit_code, truncated, timed_out, (time.monotonic() - started) * 1000)

    async def exec_supervisor(self, command: str, timeout_s: float | None = None) -> ExecResult:
        """One ``docker exec`` as the supervisor's uid (the runner serves the agent's uid only)."""
        if self.supervisor_uid is None:
            return await super().exec_supervisor(command, timeout_s)
        timeout = float(timeout_s if timeout_s is not None else self.limits.exec_timeout_s)
        if not 0 < timeout <= 86400:
            raise SandboxError(f"timeout must be in (0, 86400] seconds, got {timeout_s!r}")
        if not isinstance(command, str) or "\0" in command or len(command) > MAX_COMMAND_CHARS:
            raise SandboxError("command must be a string without NUL bytes, within the kernel's limit")
        if self._destroyed:
            raise SandboxError("sandbox was destroyed")
        user = f"{self.supervisor_uid}:{self.supervisor_uid}"
        return await self._exec_via_docker(command, timeout, self.limits.output_cap_bytes, user=user)

    async def load_supervisor_archive(self, archive: bytes) -> None:
        if self.supervisor_uid is None:
            return await super().load_supervisor_archive(archive)
        if len(archive) > self.limits.transfer_max_bytes:
            raise SandboxError(f"archive of {len(archive)} bytes exceeds the transfer limit")
        check_supervisor_archive(archive)
        user = f"{self.supervisor_uid}:{self.supervisor_uid}"
        api = self._backend.client.api
        await self._backend.call(docker_exec.put_tar, api, self.id, archive, user, "/", True)

    async def read_file(self, path: str, max_bytes: int | None = None) -> bytes:
        limit = min(max_bytes or self.limits.transfer_max_bytes, self.limits.transfer_max_bytes)
        request = {"op": "read", "path": workspace_path(path), "max": limit}
        reply = await self._file_request(request, limit * 2 + 65536)
        return runner_protocol.decode_data(reply.get("data"), limit)

    async def write_file(self, path: str, data: bytes) -> None:
        if len(data) > self.limits.transfer_max_bytes:
            raise SandboxError(f"file of {len(data)} bytes exceeds the transfer limit")
        request = {"op": "write", "path": workspace_path(path), "data": base64.b64encode(data).decode()}
        await self._file_request(request, 65536)

    async def list_dir(self, path: str = ".") -> list[DirEntry]:
        reply = await self._file_request({"op": "list", "path": workspace_path(path)}, 8 << 20)
        return runner_protocol.dir_entries(reply)

    async def ping(self) -> None:
        """Check the sandbox answers (its runner is up); raise SandboxError if not."""
        await self._file_request({"op": "ping"}, 4096)

    async def export_workspace(self) -> bytes:
        limit = self.limits.transfer_max_bytes
        reply = await self._file_request({"op": "get_tar", "max": limit}, limit * 2 + 65536)
        return runner_protocol.decode_data(reply.get("data"), limit)

    async def load_workspace(self, archive: bytes) -> None:
        """Unpack a tar archive into /workspace (done as the agent's user, by GNU tar)."""
        await self._file_request({"op": "put_tar", "data": base64.b64encode(archive).decode()}, 65536)

    async def destroy(self) -> None:
        if self._destroyed:
            return
        self._destroyed = True
        if self._runner is not None:
            self._runner.close()
            self._runner = None
        if self._lost is not None:
            return  # its engine is gone: the backend removes it when the engine answers again
        await self._backend.remove(self.id)

    def mark_lost(self, reason: str) -> None:
        """Its engine stopped answering: drop the runner; every operation now raises EngineUnavailable."""
        self._lost = reason
        if self._runner is not None:
            self._runner.close()
            self._runner = None

    def mark_gone(self) -> None:
        """Removed by someone else (its backend's gc found it gone): ``destroy`` has nothing left to do."""
        self._destroyed = True


class _NoInterpreter(SandboxError):
    """The image has no python3: use one ``docker exec`` per command instead of the runner."""
