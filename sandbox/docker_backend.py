"""The Docker backend: hardened sandboxes on one engine, for one rlguard instance, and leak-free cleanup.

It creates containers (with ``sandbox.hardening``'s host config, labels naming the rlguard instance,
the episode and the owning process), takes over those of a gateway that died, and removes what it
made: on ``destroy``, at ``close``, at interpreter exit, and in a periodic gc that also removes
orphans (containers whose owner is dead, ``sandbox.ownership``). The sandboxes themselves are
``sandbox.docker_sandbox``. The docker SDK is synchronous: its calls run in a bounded thread pool so
many sandboxes can be driven from one event loop; a call the engine does not answer is judged by
``sandbox.engine_health``.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import io
import os
import secrets
import tarfile
import time
import uuid
import weakref
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sandbox import docker_exec, ownership, seccomp
from sandbox.base import EngineUnavailable, SandboxBackend, SandboxError, SandboxGone, SandboxSpec
from sandbox.docker_sandbox import DockerSandbox
from sandbox.endpoint import EngineEndpoint
from sandbox.engine_health import EngineHealth
from sandbox.hardening import KEEPER_UID, MASKED_PATHS, host_config_kwargs
from sandbox.paths import WORKSPACE
from sandbox.settings import SandboxSettings

if TYPE_CHECKING:
    import docker

    from sandbox.engines import TlsConfig
    from sandbox.settings import SandboxEnv


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


class DockerBackend(SandboxBackend):
    """Creates hardened sandboxes on one Docker engine for one rlguard instance."""

    def __init__(
        self,
        instance: str,
        docker_host: str | None,
        settings: SandboxSettings,
        *,
        fast_path: bool = True,
        name: str | None = None,
        tls: TlsConfig | None = None,
    ) -> None:
        self.instance = instance
        self.settings = settings
        self.fast_path = fast_path
        self.docker_host = resolve_docker_host(docker_host)
        #: The engine's name in a fleet (stored with each episode); the URL by default.
        self.name = name or self.docker_host
        self.endpoint = EngineEndpoint(self.docker_host, tls)
        self._threads = ThreadPoolExecutor(settings.engine_concurrency, thread_name_prefix="rlguard-docker")
        try:
            self.client: docker.DockerClient = self.endpoint.api_client(
                120, max_pool_size=settings.engine_concurrency + 8
            )
        except Exception as exc:  # DockerException, or the ssh client missing: one line either way
            self._threads.shutdown(wait=False)
            raise SandboxError(f"no Docker engine answers at {self.docker_host}: {exc}") from exc
        self._token = uuid.uuid4().hex
        ownership.LIVE_TOKENS.add(self._token)
        self._sandboxes: dict[str, DockerSandbox] = {}
        #: Containers lost when the engine stopped answering: removed first when it answers again.
        self._lost_ids: set[str] = set()
        self._images: dict[str, tuple[bool, float]] = {}
        #: Whether the engine still answers (asked after a call or a runner channel fails).
        self.health = EngineHealth(self.name, self.docker_host, self.endpoint, self.client.api.api_version)
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
        """Run a blocking docker SDK call in the bounded thread pool. A call the engine does not
        answer at all (connection refused or dropped, timed out) raises EngineUnavailable when the
        engine fails a ping too, else a SandboxError."""
        import requests.exceptions

        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._threads, lambda: fn(*args, **kwargs))
        except (requests.exceptions.ConnectionError, requests.exceptions.Timeout) as exc:
            raise await self.health.failure(exc) from exc

    def abandon(self, reason: str) -> list[str]:
        """The engine stopped answering: every sandbox here is lost (operations raise
        EngineUnavailable, destroy is a no-op); their containers are removed by the first gc after
        the engine answers again. Returns the lost container ids."""
        lost = list(self._sandboxes)
        for sandbox in self._sandboxes.values():
            sandbox.mark_lost(reason)
        self._lost_ids.update(lost)
        self._sandboxes.clear()
        return lost

    @property
    def in_use(self) -> int:
        """Containers this backend holds now (episodes', warm and grading ones)."""
        return len(self._sandboxes)

    async def has_image(self, image: str, ttl_s: float = 60.0) -> bool:
        """Whether the engine holds ``image`` (remembered for ``ttl_s``; a miss is asked again)."""
        import docker.errors

        known = self._images.get(image)
        if known is not None and known[0] and time.monotonic() - known[1] < ttl_s:
            return True
        try:
            await self.call(self.client.api.inspect_image, image)
            present = True
        except docker.errors.APIError:  # not found (or refused): placed elsewhere if possible
            present = False
        self._images[image] = (present, time.monotonic())
        return present

    async def _learn_engine(self) -> None:
        """Read the engine's facts once: its seccomp default and how much memory it has."""
        info = await self.call(self.client.info)
        runtime = self.settings.runtime
        if runtime not in (info.get("Runtimes") or {}):
            raise SandboxError(
                f"the Docker engine at {self.docker_host} has no {runtime!r} runtime "
                f"(RLGUARD_SANDBOX__RUNTIME); register it: scripts/ensure_runsc.sh"
            )
        self._engine_memory = int(info.get("MemTotal") or 0)
        mode = self.settings.seccomp
        if mode == "auto":
            mode = "engine" if seccomp.engine_default_in_force(info.get("SecurityOptions")) else "rlguard"
        self._seccomp = seccomp.profile_json() if mode == "rlguard" else None

    async def _ensure_started(self) -> None:
        if self._closed:
            raise SandboxError("backend is closed")
        if not self._started:
            await self._learn_engine()  # a refusal (no such runtime) is raised again on the next call
            self._started = True
            await self.gc()
            self._gc_task = asyncio.get_running_loop().create_task(self._gc_forever())

    async def _gc_forever(self) -> None:
        while True:
            await asyncio.sleep(self.settings.gc_interval_s)
            with contextlib.suppress(Exception):
                await self.gc()

    async def create(self, spec: SandboxSpec) -> DockerSandbox:
        if spec.supervised and spec.workspace is not None:
            raise SandboxError("a supervised sandbox starts empty: its supervisor loads /workspace")
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
            await self.call(docker_exec.put_tar, self.client.api, sandbox.id, archive, sandbox.user)

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
        labels[ownership.AGENT_UID] = str(uid)
        supervisor_uid = self._new_uid(also_taken={uid}) if spec.supervised else None
        host_config = api.create_host_config(
            **host_config_kwargs(spec.limits, self._seccomp, uid, supervisor_uid, self.settings.runtime)
        )
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
        self._images[spec.image] = (True, time.monotonic())
        sandbox = DockerSandbox(self, container_id, spec, uid, supervisor_uid)
        self._sandboxes[container_id] = sandbox
        try:
            await self.call(api.start, container_id)
        except BaseException as exc:
            await sandbox.destroy()
            if isinstance(exc, docker.errors.APIError):
                raise SandboxError(f"engine could not start the sandbox: {exc.explanation or exc}") from exc
            raise
        return sandbox

    def _new_uid(self, also_taken: set[int] | None = None) -> int:
        """A uid from the configured range that none of this backend's sandboxes has.

        Drawn at random, so gateways sharing an engine rarely meet (a clash costs only shared
        per-uid limits between those two sandboxes, never access: each has its own namespaces).
        """
        taken = {sb.uid for sb in self._sandboxes.values()} | (also_taken or set())
        taken |= {sb.supervisor_uid for sb in self._sandboxes.values() if sb.supervisor_uid is not None}
        low, high = self.settings.agent_uid_min, self.settings.agent_uid_max
        for _ in range(64):
            uid = low + secrets.randbelow(high - low + 1)
            if uid not in taken:
                return uid
        raise SandboxError("no free agent uid left in the configured range")

    async def remove(self, container_id: str) -> None:
        """Force-remove a container; a container that is already gone is fine. On an engine that
        does not answer, it is remembered and removed by the first gc after the engine is back."""
        import docker.errors

        self._sandboxes.pop(container_id, None)
        try:
            await self.call(self.client.api.remove_container, container_id, force=True, v=True)
        except docker.errors.NotFound:
            pass
        except EngineUnavailable:
            self._lost_ids.add(container_id)
            raise
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

    async def gc(self, instance: str | None = None) -> int:
        held_before = set(self._sandboxes)
        label = f"{ownership.INSTANCE}={instance or self.instance}"
        containers = await self.call(self.client.api.containers, all=True, filters={"label": label})
        present = {c["Id"] for c in containers}
        if instance is None or instance == self.instance:
            # held here but gone from the engine (another gateway took the episode over and removed
            # it, or an operator did): it no longer counts against the engine's limit
            for container_id in held_before - present:
                gone = self._sandboxes.pop(container_id, None)
                if gone is not None:
                    gone.mark_gone()
        lost = sorted(self._lost_ids & present)  # lost when the engine stopped answering: no age guard
        self._lost_ids &= present
        orphans = [c["Id"] for c in containers if c["Id"] not in self._lost_ids and self._is_orphan(c)]
        if orphans and self.retain is not None:
            wanted = set(await self.retain(orphans))
            orphans = [cid for cid in orphans if cid not in wanted]
        await asyncio.gather(*(self.remove(cid) for cid in [*lost, *orphans]))
        self._lost_ids.difference_update(lost)
        return len(lost) + len(orphans)

    async def attach(self, sandbox_id: str, spec: SandboxSpec, engine: str | None = None) -> DockerSandbox:
        """Take over a running rlguard sandbox whose owner died (of this instance or of another
        gateway's that shared the database: the caller claimed its episode's lease first): gc now
        spares it and ``destroy`` removes it. The agent's uid is read from its label."""
        import docker.errors

        if engine is not None and engine != self.name:
            raise SandboxGone(f"sandbox {sandbox_id[:12]} is on engine {engine!r}, not {self.name!r}")
        held = self._sandboxes.get(sandbox_id)
        if held is not None:
            return held
        await self._ensure_started()
        try:
            info = await self.call(self.client.api.inspect_container, sandbox_id)
        except docker.errors.NotFound as exc:
            raise SandboxGone(f"sandbox {sandbox_id[:12]} is no longer on engine {self.name!r}") from exc
        labels = (info.get("Config") or {}).get("Labels") or {}
        if labels.get(ownership.ROLE) != "sandbox" or ownership.INSTANCE not in labels:
            raise SandboxGone(f"container {sandbox_id[:12]} is not an rlguard sandbox")
        if not (info.get("State") or {}).get("Running"):
            raise SandboxGone(f"sandbox {sandbox_id[:12]} is not running (its engine restarted?)")
        uid = _agent_uid(labels, info)
        sandbox = DockerSandbox(self, info["Id"], spec, uid)
        self._sandboxes[sandbox.id] = sandbox
        return sandbox

    def _is_orphan(self, container: dict) -> bool:
        labels = container.get("Labels") or {}
        if container["Id"] in self._sandboxes:
            return False  # held here (made or attached by this backend)
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
        # A start cancelled while the engine was creating its container leaves one that no sandbox
        # object holds: let the engine calls still in flight finish, then remove all that carry our token.
        await asyncio.to_thread(self._threads.shutdown, wait=True)
        await asyncio.to_thread(self._remove_unheld)
        ownership.LIVE_TOKENS.discard(self._token)
        self.client.close()

    def _remove_unheld(self) -> None:
        import docker.errors

        with contextlib.suppress(docker.errors.DockerException):
            for container in self.client.api.containers(
                all=True, filters={"label": f"{ownership.OWNER_TOKEN}={self._token}"}
            ):
                with contextlib.suppress(docker.errors.DockerException):
                    self.client.api.remove_container(container["Id"], force=True, v=True)

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


def _agent_uid(labels: dict[str, str], info: dict[str, Any]) -> int:
    """The sandbox's agent uid: its label, else the uid of its /workspace tmpfs."""
    if labels.get(ownership.AGENT_UID, "").isdigit():
        return int(labels[ownership.AGENT_UID])
    options = ((info.get("HostConfig") or {}).get("Tmpfs") or {}).get(WORKSPACE, "")
    for option in options.split(","):
        if option.startswith("uid=") and option[4:].isdigit():
            return int(option[4:])
    raise SandboxGone("the sandbox does not say its agent uid")


def _missing_image(image: str) -> str:
    """What to run when ``image`` is absent: a task environment is built per suite, the base image once."""
    if image.startswith("rlguard/task-env:"):
        return f"task environment image {image!r} is not present; run `rlguard tasks build-env SUITE`"
    return f"sandbox image {image!r} is not present; run `rlguard sandbox image ensure`"
