"""Warm pool: pre-started sandboxes per (image, limits), so an episode does not wait for a container.

A pooled container is started with its runner already up and an empty /workspace; acquiring one
only copies the episode's workspace in. A sandbox handed out is the episode's alone and is destroyed
afterwards, never returned: nothing one episode leaves behind can reach the next. Docker labels
cannot change after creation, so a pooled container's ``rlguard.episode`` label is empty (and
``rlguard.pooled=1``); the episode id lives on the ``Sandbox`` object.

Only the ``max_keys`` most recently used (image, limits) pairs are kept warm, so tasks with their own
limits cannot make idle containers pile up.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import replace

from sandbox.base import SandboxError, SandboxSpec
from sandbox.docker_backend import DockerBackend, workspace_archive
from sandbox.docker_sandbox import DockerSandbox

PoolKey = tuple[str, str]


def pool_key(spec: SandboxSpec) -> PoolKey:
    """Sandboxes are interchangeable when image and every limit are equal."""
    return spec.image, spec.limits.model_dump_json()


class WarmPool:
    """Keeps ``size`` started sandboxes per (image, limits) seen; refills in the background."""

    def __init__(
        self, backend: DockerBackend, size: int, max_keys: int = 4, room: Callable[[], int] | None = None
    ) -> None:
        """``room``: how many more containers the engine may hold now (a fleet's per-engine limit);
        refills stop there."""
        self.backend = backend
        self.size = size
        self.max_keys = max_keys
        self.room = room
        self._ready: OrderedDict[PoolKey, deque[DockerSandbox]] = OrderedDict()
        self._refills: dict[PoolKey, asyncio.Task] = {}
        self._closed = False
        self._suspended = False

    async def start(self, spec: SandboxSpec | None = None) -> None:
        """Remove orphans of crashed owners, then fill the pool for ``spec`` (default image/limits).
        Also resumes a suspended pool (its engine answers again)."""
        self._suspended = False
        await self.backend.gc()
        if spec is None:
            spec = SandboxSpec(image=self.backend.default_image, limits=self.backend.settings.limits)
        await self._refill(pool_key(spec), spec)

    async def acquire(self, spec: SandboxSpec) -> DockerSandbox:
        """A sandbox for ``spec``: a warm one with the workspace copied in, else a cold start."""
        if self._closed:
            raise RuntimeError("pool is closed")
        if spec.supervised:  # a warm sandbox has no supervisor uid owning its /workspace
            return await self.backend.create(spec)
        key = pool_key(spec)
        ready = self._ready.setdefault(key, deque())
        self._ready.move_to_end(key)
        await self._evict_beyond(self.max_keys)
        sandbox = ready.popleft() if ready else None
        self._schedule_refill(key, spec)
        if sandbox is None:
            return await self.backend.create(spec)
        archive = spec.workspace
        if not isinstance(archive, bytes):
            archive = await asyncio.to_thread(workspace_archive, archive, spec.limits.transfer_max_bytes)
        sandbox.spec = spec
        try:
            if archive:
                await self.backend.load_archive(sandbox, archive)
            elif sandbox.uses_runner:
                await sandbox.ping()
        except SandboxError:
            await sandbox.destroy()  # a warm sandbox that died while waiting: start a fresh one
            return await self.backend.create(spec)
        except BaseException:
            await sandbox.destroy()
            raise
        return sandbox

    async def _evict_beyond(self, keep: int) -> None:
        while len(self._ready) > keep:
            key, waiting = self._ready.popitem(last=False)
            task = self._refills.pop(key, None)
            if task is not None:
                task.cancel()
            await asyncio.gather(*(sandbox.destroy() for sandbox in waiting), return_exceptions=True)

    def ready_count(self, spec: SandboxSpec) -> int:
        """How many warm sandboxes wait for ``spec``'s image and limits."""
        return len(self._ready.get(pool_key(spec), ()))

    def suspend(self) -> None:
        """The engine stopped answering: forget the waiting sandboxes (the backend has marked them
        lost and removes them once the engine is back) and refill nothing until ``start``."""
        self._suspended = True
        for task in self._refills.values():
            task.cancel()
        self._refills.clear()
        self._ready.clear()

    def _schedule_refill(self, key: PoolKey, spec: SandboxSpec) -> None:
        task = self._refills.get(key)
        if self.size > 0 and not self._suspended and (task is None or task.done()):
            self._refills[key] = asyncio.get_running_loop().create_task(self._refill(key, spec))

    async def _refill(self, key: PoolKey, spec: SandboxSpec) -> None:
        """Start sandboxes until ``size`` wait for ``key`` (acquires may drain it meanwhile)."""
        template = replace(spec, workspace=None, episode_id=None)
        ready = self._ready.setdefault(key, deque())
        while not self._closed and not self._suspended and (missing := self._missing(ready)) > 0:
            started = await asyncio.gather(
                *(self._start_one(template) for _ in range(missing)), return_exceptions=True
            )
            good = [sandbox for sandbox in started if isinstance(sandbox, DockerSandbox)]
            for sandbox in good:
                if self._closed or self._suspended:
                    await sandbox.destroy()
                else:
                    ready.append(sandbox)
            if not good:
                return  # the engine refuses: the next acquire cold-starts and tries again

    def _missing(self, ready: deque[DockerSandbox]) -> int:
        missing = self.size - len(ready)
        return missing if self.room is None else min(missing, self.room())

    async def _start_one(self, template: SandboxSpec) -> DockerSandbox:
        sandbox = await self.backend.start_container(template, pooled=True)
        try:
            await sandbox.warm_up()
        except BaseException:
            await sandbox.destroy()
            raise
        return sandbox

    async def close(self) -> None:
        """Stop refilling and destroy every sandbox still waiting in the pool."""
        self._closed = True
        for task in self._refills.values():
            task.cancel()
        for task in self._refills.values():
            with contextlib.suppress(BaseException):
                await task
        waiting = [sandbox for ready in self._ready.values() for sandbox in ready]
        self._ready.clear()
        await asyncio.gather(*(sandbox.destroy() for sandbox in waiting), return_exceptions=True)
