"""The Docker backend: hardened containers, a fast in-container runner, leak-free cleanup.

Every container gets: no network, a read-only root, size-capped tmpfs ``/workspace`` and ``/tmp``
(charged to the memory limit), agent commands as a uid of its own drawn from a range no host account
uses (the container's own init and keep-alive as ``nobody``), every capability dropped,
no-new-privileges, rlguard's seccomp profile, a pids limit, memory with swap equal to it, a CPU
quota, an init that reaps zombies, nofile/fsize ulimits, and labels naming the
rlguard instance, the episode and the owning process.

Commands and file operations go through ``sandbox.inside.executor`` started once per container over the
exec attach stream (see ``sandbox.attach`` for why not a socket file); images without python3 fall
back to one ``docker exec`` per command. The docker SDK is synchronous: its calls run in a bounded
thread pool so many sandboxes can be driven from one event loop.
"""

from __future__ import annotations

import asyncio
import atexit
import base64
import contextlib
import io
import json
import os
import secrets
import tarfile
import time
import uuid
import weakref
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sandbox import ownership, seccomp
from sandbox.attach import AttachedExec, ChannelClosed
from sandbox.base import (
    DirEntry,
    ExecResult,
    PathEscapeError,
    Sandbox,
    SandboxBackend,
    SandboxError,
    SandboxSpec,
)
from sandbox.inside import executor
from sandbox.paths import WORKSPACE, workspace_path
from sandbox.settings import SandboxLimits, SandboxSettings, parse_size

if TYPE_CHECKING:
    import docker

    from sandbox.settings import SandboxEnv

# The container's own processes (init and its ``sleep``) run as ``nobody``: the agent can ``kill -9
# -1`` all it likes without stopping its container; every exec names the sandbox's agent uid.
KEEPER_UID = "65534:65534"
RUNNER_SOURCE = Path(executor.__file__).read_text()
RUNNER_BOOT = "import os;exec(compile(os.environ.pop('RLGUARD_RUNNER'),'rlguard-exec','exec'))"
# ``exec -a`` renames the interpreter so ``pkill -f python`` in an episode does not hit the runner.
RUNNER_LAUNCHERS = (
    ["/bin/bash", "-c", 'exec -a rlguard-exec python3 -I -S -c "$0"', RUNNER_BOOT],
    ["python3", "-I", "-S", "-c", RUNNER_BOOT],
)
RUNNER_GRACE_S = 5.0
CONTROL_TIMEOUT_S = 60.0
MAX_COMMAND_CHARS = 100_000  # one argv string may not exceed 128 KiB (MAX_ARG_STRLEN)
RUNNER_KILLED_NOTE = "[rlguard: the sandbox's command runner was killed; this command's result is lost]"


def resolve_docker_host(docker_host: str | None) -> str:
    """The engine URL in force: the setting, else ``DOCKER_HOST``, else the default socket."""
    return docker_host or os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def workspace_archive(workspace: Path | bytes | None, limit: int) -> bytes | None:
    """The workspace as tar bytes (a directory is archived here), refused over ``limit``."""
    if workspace is None:
        return None
    if isinstance(workspace, bytes):
        data = workspace
    else:
        root = Path(workspace)
        if not root.is_dir():
            raise SandboxError(f"workspace {root} is not a directory")
        size = sum(p.lstat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink())
        if size > limit:
            raise SandboxError(f"workspace {root} holds {size} bytes, over the {limit}-byte limit")
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as archive:
            for child in sorted(root.iterdir()):
                archive.add(child, arcname=child.name)
        data = buffer.getvalue()
    if len(data) > limit:
        raise SandboxError(f"workspace archive is {len(data)} bytes, over the {limit}-byte limit")
    return data


# Docker's default masked paths, plus host details an agent has no use for: the host kernel's command
# line (boot flags, VM ports) and kernel symbol names. Setting MaskedPaths replaces the default list.
MASKED_PATHS = [
    "/proc/asound",
    "/proc/acpi",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/proc/cmdline",
    "/proc/kallsyms",
    "/proc/modules",
]


def host_config_kwargs(limits: SandboxLimits, seccomp_profile: str | None, uid: int) -> dict[str, Any]:
    """The hardening every sandbox container gets (arguments of ``create_host_config``).

    ``uid`` is the sandbox's own agent uid (owner of /workspace): per-uid kernel limits (inotify
    instances and watches, ``RLIMIT_NPROC``, keyring quotas, ...) are then never shared between
    sandboxes or with a host account, which sharing one uid such as 1000 would do.
    """
    memory = limits.memory_bytes
    security = ["no-new-privileges:true"]
    if seccomp_profile is not None:
        security.append(f"seccomp={seccomp_profile}")
    tmpfs_opts = "rw,exec,nosuid,nodev"
    return {
        "network_mode": "none",
        "read_only": True,
        "tmpfs": {
            WORKSPACE: f"{tmpfs_opts},size={parse_size(limits.workspace_size)},uid={uid},gid={uid},mode=0755",
            "/tmp": f"{tmpfs_opts},size={parse_size(limits.tmp_size)},mode=1777",
        },
        "shm_size": 16 << 20,
        "cap_drop": ["ALL"],
        "security_opt": security,
        "pids_limit": limits.pids,
        "mem_limit": memory,
        "memswap_limit": memory,
        "nano_cpus": int(limits.cpus * 1e9),
        "init": True,
        "ipc_mode": "private",
        "ulimits": [
            {"Name": "nofile", "Soft": limits.nofile, "Hard": limits.nofile},
            {"Name": "fsize", "Soft": limits.fsize_bytes, "Hard": limits.fsize_bytes},
            {"Name": "core", "Soft": 0, "Hard": 0},
        ],
    }


class DockerSandbox(Sandbox):
    """One hardened container; requests go one at a time through its runner."""

    def __init__(self, backend: DockerBackend, container_id: str, spec: SandboxSpec, uid: int) -> None:
        self.id = container_id
        self.spec = spec
        #: The agent's uid in this sandbox (its own; see ``host_config_kwargs``).
        self.uid = uid
        self.user = f"{uid}:{uid}"
        self._backend = backend
        self._lock = asyncio.Lock()
        self._runner: AttachedExec | None = None
        self._fast = backend.fast_path
        self._destroyed = False
        self._abandoned = False

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
                environment={"RLGUARD_RUNNER": RUNNER_SOURCE},
            )
        except docker.errors.DockerException as exc:
            raise SandboxError(f"sandbox {self.id[:12]} is not running: {exc}") from exc
        runner = await AttachedExec.start(self._backend.docker_host, api.api_version, created["Id"])
        try:
            await self._roundtrip(runner, {"op": "ping"}, CONTROL_TIMEOUT_S, 4096)
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

    async def _roundtrip(self, runner: AttachedExec, request: dict, timeout: float, max_line: int) -> dict:
        # A random id per request: a process in the sandbox cannot forge an answer blindly, and a
        # stray or injected line desynchronises nothing: it just breaks the channel.
        request_id = secrets.token_hex(8)
        await runner.send(json.dumps({**request, "id": request_id}).encode() + b"\n")
        line = await asyncio.wait_for(runner.read_line(max_line), timeout)
        try:
            reply = json.loads(line)
        except ValueError as exc:
            raise ChannelClosed("sandbox runner sent invalid JSON") from exc
        if (
            not isinstance(reply, dict)
            or reply.get("id") != request_id
            or not isinstance(reply.get("ok"), bool)
        ):
            raise ChannelClosed("sandbox runner sent an answer of the wrong shape")
        return reply

    async def _request(self, request: dict, timeout: float, max_line: int) -> dict:
        """Send one request through the runner (starting it if needed); raise on refusal."""
        if self._destroyed:
            raise SandboxError("sandbox was destroyed")
        if self._abandoned:
            self._abandoned = False
            await self._reset_runner()
        if self._runner is None:
            self._runner = await self._start_runner()
        try:
            reply = await self._roundtrip(self._runner, request, timeout, max_line)
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
            kind, message = reply.get("kind"), str(reply.get("message", "refused"))[:2000]
            if kind == "path_escape":
                raise PathEscapeError(message)
            if kind == "not_found":
                raise FileNotFoundError(message)
            raise SandboxError(message)
        return reply

    async def _file_request(self, request: dict, max_line: int) -> dict:
        """A file operation through the runner; a runner that does not answer is a SandboxError."""
        async with self._lock:
            try:
                return await self._request(request, CONTROL_TIMEOUT_S, max_line)
            except TimeoutError:
                raise SandboxError(f"sandbox runner did not answer within {CONTROL_TIMEOUT_S:g}s") from None

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
                return await self._backend.docker_exec(self, command, timeout, cap)
            started = time.monotonic()
            request = {"op": "exec", "cmd": command, "timeout": timeout, "cap": cap}
            try:
                reply = await self._request(request, timeout + RUNNER_GRACE_S, 8 * cap + 65536)
            except _NoInterpreter:
                self._fast = False
                return await self._backend.docker_exec(self, command, timeout, cap)
            except TimeoutError:
                return ExecResult(
                    output=f"[rlguard: command timed out after {timeout:g}s; every process was killed]",
                    exit_code=124,
                    timed_out=True,
                    duration_ms=(time.monotonic() - started) * 1000,
                )
            except ChannelClosed:
                return ExecResult(
                    RUNNER_KILLED_NOTE, exit_code=137, duration_ms=(time.monotonic() - started) * 1000
                )
        return _exec_result(reply, cap)

    async def read_file(self, path: str, max_bytes: int | None = None) -> bytes:
        limit = min(max_bytes or self.limits.transfer_max_bytes, self.limits.transfer_max_bytes)
        request = {"op": "read", "path": workspace_path(path), "max": limit}
        reply = await self._file_request(request, limit * 2 + 65536)
        return _b64(reply.get("data"), limit)

    async def write_file(self, path: str, data: bytes) -> None:
        if len(data) > self.limits.transfer_max_bytes:
            raise SandboxError(f"file of {len(data)} bytes exceeds the transfer limit")
        request = {"op": "write", "path": workspace_path(path), "data": base64.b64encode(data).decode()}
        await self._file_request(request, 65536)

    async def list_dir(self, path: str = ".") -> list[DirEntry]:
        reply = await self._file_request({"op": "list", "path": workspace_path(path)}, 8 << 20)
        entries = reply.get("entries")
        if not isinstance(entries, list):
            raise SandboxError("sandbox runner sent a malformed listing")
        result = []
        for entry in entries:
            if not (
                isinstance(entry, list)
                and len(entry) == 3
                and isinstance(entry[0], str)
                and isinstance(entry[2], int)
            ):
                raise SandboxError("sandbox runner sent a malformed listing")
            kind = entry[1] if entry[1] in ("file", "dir", "symlink", "other") else "other"
            result.append(DirEntry(name=entry[0], kind=kind, size=int(entry[2])))
        return result

    async def ping(self) -> None:
        """Check the sandbox answers (its runner is up); raise SandboxError if not."""
        await self._file_request({"op": "ping"}, 4096)

    async def export_workspace(self) -> bytes:
        limit = self.limits.transfer_max_bytes
        reply = await self._file_request({"op": "get_tar", "max": limit}, limit * 2 + 65536)
        return _b64(reply.get("data"), limit)

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
        await self._backend.remove(self.id)


class _NoInterpreter(SandboxError):
    """The image has no python3: use one ``docker exec`` per command instead of the runner."""


def _b64(value: Any, limit: int) -> bytes:
    if not isinstance(value, str):
        raise SandboxError("sandbox runner sent malformed data")
    try:
        data = base64.b64decode(value, validate=True)
    except ValueError as exc:
        raise SandboxError("sandbox runner sent malformed data") from exc
    if len(data) > limit:
        raise SandboxError("sandbox runner sent more data than allowed")
    return data


def _exec_result(reply: dict, cap: int) -> ExecResult:
    """Validate an untrusted exec answer into an ExecResult (the output is re-capped here)."""
    output, exit_code = reply.get("output"), reply.get("exit_code")
    if not isinstance(output, str) or not isinstance(exit_code, int) or isinstance(exit_code, bool):
        raise SandboxError("sandbox runner sent a malformed exec answer")
    truncated = reply.get("truncated") is True
    if len(output) > cap + 512:
        output, truncated = output[: cap // 2] + "\n[... truncated ...]\n" + output[-cap // 2 :], True
    duration = reply.get("duration_ms")
    return ExecResult(
        output=output,
        exit_code=max(-1, min(exit_code, 255)),
        truncated=truncated,
        timed_out=reply.get("timed_out") is True,
        duration_ms=float(duration) if isinstance(duration, int | float) else 0.0,
    )


class DockerBackend(SandboxBackend):
    """Creates hardened sandboxes on one Docker engine for one rlguard instance."""

    def __init__(
        self,
        instance: str,
        docker_host: str | None,
        settings: SandboxSettings,
        *,
        fast_path: bool = True,
    ) -> None:
        import docker

        self.instance = instance
        self.settings = settings
        self.fast_path = fast_path
        self.docker_host = resolve_docker_host(docker_host)
        self._threads = ThreadPoolExecutor(settings.engine_concurrency, thread_name_prefix="rlguard-docker")
        try:
            self.client: docker.DockerClient = docker.DockerClient(
                base_url=self.docker_host,
                version="auto",
                max_pool_size=settings.engine_concurrency + 8,
                timeout=120,
            )
        except docker.errors.DockerException as exc:
            raise SandboxError(f"no Docker engine answers at {self.docker_host}: {exc}") from exc
        self._token = uuid.uuid4().hex
        ownership.LIVE_TOKENS.add(self._token)
        self._sandboxes: dict[str, DockerSandbox] = {}
        self._seccomp: str | None = None
        self._engine_memory = 0
        #: Per image, the index of the first runner launcher that works (``len`` means none does).
        self.launchers: dict[str, int] = {}
        self._gc_task: asyncio.Task | None = None
        self._started = False
        self._closed = False
        atexit.register(_remove_on_exit, weakref.ref(self))

    @classmethod
    def from_settings(cls, settings: SandboxEnv) -> DockerBackend:
        """A backend for the configured instance, engine and sandbox settings."""
        return cls(settings.instance, settings.docker_host, settings.sandbox)

    @property
    def default_image(self) -> str:
        from sandbox.image import default_image

        return self.settings.image or default_image()

    async def call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Run a blocking docker SDK call in the bounded thread pool."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._threads, lambda: fn(*args, **kwargs))

    async def _learn_engine(self) -> None:
        """Read the engine's facts once: its seccomp default and how much memory it has."""
        info = await self.call(self.client.info)
        self._engine_memory = int(info.get("MemTotal") or 0)
        mode = self.settings.seccomp
        if mode == "auto":
            mode = "engine" if seccomp.engine_default_in_force(info.get("SecurityOptions")) else "rlguard"
        self._seccomp = seccomp.profile_json() if mode == "rlguard" else None

    async def _ensure_started(self) -> None:
        if self._closed:
            raise SandboxError("backend is closed")
        if not self._started:
            self._started = True
            await self._learn_engine()
            await self.gc()
            self._gc_task = asyncio.get_running_loop().create_task(self._gc_forever())

    async def _gc_forever(self) -> None:
        while True:
            await asyncio.sleep(self.settings.gc_interval_s)
            with contextlib.suppress(Exception):
                await self.gc()

    async def create(self, spec: SandboxSpec) -> DockerSandbox:
        archive = await asyncio.to_thread(workspace_archive, spec.workspace, spec.limits.transfer_max_bytes)
        sandbox = await self.start_container(spec)
        try:
            await sandbox.warm_up()
            if archive:
                await self.load_archive(sandbox, archive)
        except BaseException:
            await sandbox.destroy()
            raise
        return sandbox

    async def load_archive(self, sandbox: DockerSandbox, archive: bytes) -> None:
        """Put a workspace archive into a sandbox through its runner, or ``tar`` over ``docker exec``."""
        if sandbox.uses_runner:
            await sandbox.load_workspace(archive)
        else:
            await self.call(self._put_tar_via_exec, sandbox.id, archive, sandbox.user)

    def _put_tar_via_exec(self, container_id: str, archive: bytes, user: str) -> None:
        api = self.client.api
        exec_id = api.exec_create(
            container_id, ["tar", "-x", "--no-same-owner", "-C", WORKSPACE, "-f", "-"], stdin=True, user=user
        )
        sock = api.exec_start(exec_id["Id"], socket=True)
        raw = getattr(sock, "_sock", sock)
        raw.sendall(archive)
        raw.shutdown(1)
        while raw.recv(65536):
            pass
        raw.close()
        if api.exec_inspect(exec_id["Id"]).get("ExitCode") != 0:
            raise SandboxError("workspace archive was rejected by tar in the sandbox")

    async def start_container(self, spec: SandboxSpec, pooled: bool = False) -> DockerSandbox:
        """Create and start a hardened container (no workspace yet) and register it."""
        import docker.errors

        await self._ensure_started()
        labels = ownership.owner_labels(self.instance, self._token)
        labels[ownership.EPISODE] = spec.episode_id or ""
        if pooled:
            labels[ownership.POOLED] = "1"
        if self._engine_memory and spec.limits.memory_bytes > self._engine_memory:
            raise SandboxError(
                f"memory limit {spec.limits.memory} exceeds the engine's {self._engine_memory >> 20} MiB"
            )
        api = self.client.api
        uid = self._new_uid()
        host_config = api.create_host_config(**host_config_kwargs(spec.limits, self._seccomp, uid))
        host_config["MaskedPaths"] = MASKED_PATHS
        try:
            created = await self.call(
                api.create_container,
                spec.image,
                command=["sleep", "infinity"],
                user=KEEPER_UID,
                working_dir=WORKSPACE,
                labels=labels,
                host_config=host_config,
                network_disabled=True,
                stdin_open=False,
                tty=False,
            )
        except docker.errors.ImageNotFound as exc:
            raise SandboxError(_missing_image(spec.image)) from exc
        except docker.errors.APIError as exc:
            if exc.status_code == 404 and "image" in str(exc).lower():
                raise SandboxError(_missing_image(spec.image)) from exc
            raise SandboxError(f"engine refused the sandbox: {exc.explanation or exc}") from exc
        except docker.errors.DockerException as exc:
            raise SandboxError(f"no Docker engine answers at {self.docker_host}: {exc}") from exc
        container_id = created["Id"]
        sandbox = DockerSandbox(self, container_id, spec, uid)
        self._sandboxes[container_id] = sandbox
        try:
            await self.call(api.start, container_id)
        except BaseException as exc:
            await sandbox.destroy()
            if isinstance(exc, docker.errors.APIError):
                raise SandboxError(f"engine could not start the sandbox: {exc.explanation or exc}") from exc
            raise
        return sandbox

    async def docker_exec(self, sandbox: DockerSandbox, command: str, timeout: float, cap: int) -> ExecResult:
        """The slow path: one ``docker exec`` per command, under coreutils ``timeout``."""
        import docker.errors

        started = time.monotonic()
        # Docker keeps stdout and stderr apart; one pipe for both (``2>&1`` before anything runs)
        # keeps their order, as on the fast path. Afterwards every other process of the agent's uid
        # is killed (``kill -1`` spares its caller), so nothing outlives its call, as on the fast path.
        argv = [
            "/bin/sh",
            "-c",
            '"$@" 2>&1; rc=$?; kill -9 -1 2>/dev/null; exit $rc',
            "sh",
            "timeout",
            "-k",
            "2",
            f"{timeout:g}",
            "/bin/sh",
            "-c",
            command,
        ]
        try:
            output, truncated, exit_code = await asyncio.wait_for(
                self.call(self._docker_exec_blocking, sandbox.id, argv, cap, sandbox.user),
                timeout + RUNNER_GRACE_S,
            )
        except TimeoutError:
            # A background child kept the output stream open past the deadline: kill everything.
            await sandbox._reset_runner()
            output, truncated, exit_code = "", False, 124
        except docker.errors.DockerException as exc:
            raise SandboxError(f"sandbox {sandbox.id[:12]} is not running: {exc}") from exc
        timed_out = exit_code == 124
        if timed_out:
            output += (
                f"\n[rlguard: command timed out after {timeout:g}s; it and its process group were killed]"
            )
        return ExecResult(output, exit_code, truncated, timed_out, (time.monotonic() - started) * 1000)

    def _docker_exec_blocking(
        self, container_id: str, argv: list[str], cap: int, user: str
    ) -> tuple[str, bool, int]:
        api = self.client.api
        exec_id = api.exec_create(container_id, argv, stdout=True, stderr=True, user=user, workdir=WORKSPACE)
        capture = executor.Capture(cap)
        for chunk in api.exec_start(exec_id["Id"], stream=True, demux=False):
            capture.add(chunk)
        text, truncated = capture.text()
        code = api.exec_inspect(exec_id["Id"]).get("ExitCode")
        return text, truncated, code if isinstance(code, int) else -1

    def _new_uid(self) -> int:
        """A uid from the configured range that none of this backend's sandboxes has.

        Drawn at random, so gateways sharing an engine rarely meet (a clash costs only shared
        per-uid limits between those two sandboxes, never access: each has its own namespaces).
        """
        taken = {sb.uid for sb in self._sandboxes.values()}
        low, high = self.settings.agent_uid_min, self.settings.agent_uid_max
        for _ in range(64):
            uid = low + secrets.randbelow(high - low + 1)
            if uid not in taken:
                return uid
        raise SandboxError("no free agent uid left in the configured range")

    async def remove(self, container_id: str) -> None:
        """Force-remove a container; a container that is already gone is fine."""
        import docker.errors

        self._sandboxes.pop(container_id, None)
        try:
            await self.call(self.client.api.remove_container, container_id, force=True, v=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            # another remover got there first (two shutdown paths, gc): wait until the engine has
            # finished, so that when this returns the container is gone either way
            if exc.status_code != 409 or "already in progress" not in str(exc):
                raise
            await self._wait_gone(container_id)

    async def _wait_gone(self, container_id: str, timeout_s: float = 30.0) -> None:
        import docker.errors

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                await self.call(self.client.api.inspect_container, container_id)
            except docker.errors.NotFound:
                return
            await asyncio.sleep(0.05)
        raise SandboxError(f"container {container_id[:12]} is still being removed after {timeout_s:g} s")

    async def gc(self) -> int:
        containers = await self.call(
            self.client.api.containers, all=True, filters={"label": f"{ownership.INSTANCE}={self.instance}"}
        )
        orphans = [c["Id"] for c in containers if self._is_orphan(c)]
        await asyncio.gather(*(self.remove(cid) for cid in orphans))
        return len(orphans)

    def _is_orphan(self, container: dict) -> bool:
        labels = container.get("Labels") or {}
        if labels.get(ownership.OWNER_TOKEN) == self._token:
            # Ours, but no sandbox object holds it: its creation was cancelled after the engine made
            # it. The age guard leaves a creation that is just finishing alone.
            return container["Id"] not in self._sandboxes and time.time() - container.get("Created", 0) > 120
        return not ownership.owner_alive(labels)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._gc_task is not None:
            self._gc_task.cancel()
        await asyncio.gather(*(sb.destroy() for sb in list(self._sandboxes.values())), return_exceptions=True)
        ownership.LIVE_TOKENS.discard(self._token)
        self._threads.shutdown(wait=False)
        self.client.close()

    def owned_ids(self) -> list[str]:
        """Ids of the containers this backend currently owns."""
        return list(self._sandboxes)


def _remove_on_exit(ref: weakref.ref) -> None:
    """At interpreter exit, remove what an unclosed backend still owns (SIGKILL is left to gc)."""
    backend = ref()
    if backend is None or backend._closed:
        return
    for container_id in backend.owned_ids():
        with contextlib.suppress(Exception):
            backend.client.api.remove_container(container_id, force=True, v=True)


def _missing_image(image: str) -> str:
    """What to run when ``image`` is absent: a task environment is built per suite, the base image once."""
    if image.startswith("rlguard/task-env:"):
        return f"task environment image {image!r} is not present; run `rlguard tasks build-env SUITE`"
    return f"sandbox image {image!r} is not present; run `rlguard sandbox image ensure`"
