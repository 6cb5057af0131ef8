"""Sandboxes spread over many engines, behind the one sandbox interface.

A ``FleetBackend`` composes one backend and one warm pool per configured engine
(``RLGUARD_SANDBOX__ENGINES``; with none configured, the one engine of ``docker_host``) and is a
``SandboxBackend`` itself, so the gateway and the grader do not know how many engines there are.

- **Placement**: a new sandbox goes to an engine that is up and below its ``max_sandboxes`` (warm
  sandboxes count), preferring one that holds the image, then the one with the most free room
  (as a share of its limit), then one with a warm sandbox ready. An engine that refuses is skipped
  and the next one tried; only when none can take it is it an error, naming each engine's reason.
- **Health**: each engine is pinged every ``health_interval_s``; ``failures_to_down`` failures in a
  row (or one failed ping after an operation the engine did not answer) mark it down: its
  sandboxes are lost (their operations raise ``EngineUnavailable``), its pool stops, and every
  listener hears ``(engine, reason)`` so the episodes on it end as ``infra_error``. When it answers
  again, gc removes what was lost there and the pool refills.
- **gc** runs per engine, by the ownership labels (``sandbox.ownership``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from sandbox.base import (
    EngineUnavailable,
    RetainHook,
    Sandbox,
    SandboxBackend,
    SandboxError,
    SandboxGone,
    SandboxSpec,
)
from sandbox.docker_backend import DockerBackend, resolve_docker_host
from sandbox.engines import DockerEngineConfig
from sandbox.factory import get_backend
from sandbox.pool import WarmPool
from sandbox.settings import SandboxEnv, SandboxSettings

log = logging.getLogger("sandbox.fleet")

#: ``(engine name, reason)``: an engine was marked down; its sandboxes are lost.
EngineDownListener = Callable[[str, str], Awaitable[None]]

#: How long ``create`` (grading) waits for room on full engines, and how often it looks.
CREATE_WAIT_S = 300.0
FULL_POLL_S = 0.25


class _Full(SandboxError):
    """Every engine that answers is at its limit (nothing refused the sandbox): room may come."""


@dataclass
class EngineMember:
    """One engine of the fleet: its config, backend and pool (None until it first answers), health."""

    config: DockerEngineConfig
    backend: DockerBackend | None = None
    pool: WarmPool | None = None
    up: bool = False
    failures: int = 0
    reason: str = "not contacted yet"
    reserved: int = 0  # placements in progress (not yet counted by the backend)
    task: asyncio.Task[None] | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def in_use(self) -> int:
        return self.backend.in_use if self.backend is not None else 0

    @property
    def free(self) -> int:
        """Sandboxes this engine may still take (its limit minus what it holds and what is coming)."""
        return self.config.max_sandboxes - self.in_use - self.reserved

    def status(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "up": self.up,
            "in_use": self.in_use,
            "max_sandboxes": self.config.max_sandboxes,
            "reason": None if self.up else self.reason,
        }


class FleetBackend(SandboxBackend):
    """Many engines as one ``SandboxBackend`` (and one warm pool: ``start``/``acquire``/``close``)."""

    def __init__(self, instance: str, settings: SandboxSettings, engines: list[DockerEngineConfig]) -> None:
        if not engines:
            raise SandboxError("a fleet needs at least one engine")
        self.instance = instance
        self.settings = settings
        self.members = [EngineMember(config) for config in engines]
        self.listeners: list[EngineDownListener] = []
        self._retain: RetainHook | None = None
        self._closed = False

    @classmethod
    def from_settings(cls, env: SandboxEnv) -> FleetBackend:
        """The configured engines, or the one engine of ``docker_host`` when none are."""
        engines = list(env.sandbox.engines) or [DockerEngineConfig(url=resolve_docker_host(env.docker_host))]
        return cls(env.instance, env.sandbox, engines)

    # -- the retain hook goes to every engine's gc ------------------------------------------------

    @property  # type: ignore[override]
    def retain(self) -> RetainHook | None:
        return self._retain

    @retain.setter
    def retain(self, hook: RetainHook | None) -> None:
        self._retain = hook
        for member in self.members:
            if member.backend is not None:
                member.backend.retain = hook

    @property
    def default_image(self) -> str:
        from sandbox.image import default_image

        return self.settings.image or default_image()

    def member(self, name: str) -> EngineMember:
        for member in self.members:
            if member.name == name:
                return member
        raise SandboxGone(f"no engine named {name!r} in this fleet")

    def status(self) -> list[dict[str, Any]]:
        """Each engine: name, up, sandboxes held, its limit, and why it is down."""
        return [member.status() for member in self.members]

    # -- start, health ------------------------------------------------------------------------------

    async def start(self, spec: SandboxSpec | None = None) -> None:
        """Connect to every engine (in parallel), gc and fill the pools of those that answer, and
        watch their health. Fails only when no engine answers at all."""
        await asyncio.gather(*(self._connect(member, spec) for member in self.members))
        self._require_one_up()
        for member in self.members:
            member.task = asyncio.get_running_loop().create_task(
                self._watch(member), name=f"rlguard-engine-health-{member.name}"
            )

    async def connect(self) -> None:
        """Connect to every engine without filling pools or watching health (one-off commands:
        ``rlguard sandbox gc``)."""
        await asyncio.gather(*(self._connect(member, None, fill=False) for member in self.members))
        self._require_one_up()

    def _require_one_up(self) -> None:
        if not any(member.up for member in self.members):
            if len(self.members) == 1:
                raise SandboxError(self.members[0].reason)
            reasons = "; ".join(f"{m.name}: {m.reason}" for m in self.members)
            raise SandboxError(f"no sandbox engine answers ({reasons})")

    async def _connect(self, member: EngineMember, spec: SandboxSpec | None, fill: bool = True) -> None:
        """Build the engine's backend and pool if needed, then gc and fill; mark it up or down."""
        try:
            if member.backend is None:
                backend = await asyncio.to_thread(get_backend, member.config, self.instance, self.settings)
                backend.retain = self._retain
                size = member.config.warm_pool_size
                member.backend = backend
                member.pool = WarmPool(
                    backend,
                    self.settings.warm_pool_size if size is None else size,
                    room=lambda m=member: m.free,
                )
            assert member.pool is not None
            member.up, member.failures, member.reason = True, 0, ""
            if fill:
                await member.pool.start(spec)
        except Exception as exc:
            reason = str(exc) if isinstance(exc, SandboxError) else f"{type(exc).__name__}: {exc}"
            member.up, member.reason = False, reason[:500]
            log.warning("engine does not answer", extra={"engine": member.name, "reason": member.reason})

    async def _watch(self, member: EngineMember) -> None:
        """Ping the engine forever; mark it down after ``failures_to_down`` failures, up when back."""
        config = member.config
        while not self._closed:
            await asyncio.sleep(config.health_interval_s)
            try:
                await self._check(member)
            except Exception:  # never let the watch die: log and look again next round
                log.exception("engine health check failed", extra={"engine": member.name})

    async def _check(self, member: EngineMember) -> None:
        config = member.config
        if member.backend is None:
            await self._connect(member, None)
            return
        answers = await member.backend.health.answers(config.health_timeout_s)
        if answers and not member.up:
            log.info("engine answers again", extra={"engine": member.name})
            await self._connect(member, None)
        elif answers:
            member.failures = 0
        elif member.up:
            member.failures += 1
            if member.failures >= config.failures_to_down:
                await self.mark_down(member, f"no answer to {member.failures} pings")

    async def mark_down(self, member: EngineMember, reason: str) -> None:
        """The engine is down: its sandboxes are lost, its pool stops, the listeners are told."""
        if not member.up:
            return
        member.up, member.reason = False, reason
        lost: list[str] = []
        if member.backend is not None:
            lost = member.backend.abandon(reason)
        if member.pool is not None:
            member.pool.suspend()
        log.error("engine is down", extra={"engine": member.name, "reason": reason, "lost": len(lost)})
        for listener in list(self.listeners):
            try:
                await listener(member.name, reason)
            except Exception:
                log.exception("an engine-down listener failed", extra={"engine": member.name})

    async def _confirm_down(self, member: EngineMember, exc: EngineUnavailable) -> None:
        """An operation found the engine silent (and a ping failed): mark it down now."""
        await self.mark_down(member, str(exc))

    # -- placement ----------------------------------------------------------------------------------

    async def _image_presence(self, image: str) -> dict[str, bool]:
        """Which engines that are up hold ``image`` (cached per engine; an engine that does not
        answer the question is marked down)."""
        present: dict[str, bool] = {}
        for member in self.members:
            if not member.up or member.backend is None:
                continue
            try:
                present[member.name] = await member.backend.has_image(image)
            except EngineUnavailable as exc:
                await self._confirm_down(member, exc)
            except SandboxError:
                present[member.name] = False
        return present

    def _best(self, spec: SandboxSpec, images: dict[str, bool], tried: set[str]) -> EngineMember | None:
        """The engine to try next (see the module docstring), chosen from the counts as they are
        now: no await between choosing and reserving, so concurrent placements spread out."""
        candidates = [
            m
            for m in self.members
            if m.up and m.backend is not None and m.name not in tried and m.name in images and m.free > 0
        ]
        if not candidates:
            return None

        def rank(member: EngineMember) -> tuple[bool, float, int, str]:
            ready = member.pool.ready_count(spec) if member.pool is not None else 0
            return (
                not images[member.name],
                -member.free / member.config.max_sandboxes,
                -min(ready, 1),
                member.name,
            )

        return min(candidates, key=rank)

    async def _place(
        self, spec: SandboxSpec, start: Callable[[EngineMember], Awaitable[Sandbox]], wait_s: float = 0.0
    ) -> Sandbox:
        """Try the engines best first; the first that starts the sandbox holds it. When every engine
        that answers is merely full, wait up to ``wait_s`` for room (a sandbox that ends frees it)."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                return await self._place_once(spec, start)
            except _Full as exc:
                if time.monotonic() >= deadline:
                    raise SandboxError(str(exc)) from None
            await asyncio.sleep(FULL_POLL_S)

    async def _place_once(
        self, spec: SandboxSpec, start: Callable[[EngineMember], Awaitable[Sandbox]]
    ) -> Sandbox:
        problems: list[str] = []
        tried: set[str] = set()
        images = await self._image_presence(spec.image)
        while (member := self._best(spec, images, tried)) is not None:
            tried.add(member.name)
            member.reserved += 1
            try:
                return await start(member)
            except EngineUnavailable as exc:
                await self._confirm_down(member, exc)
                problems.append(f"{member.name}: {exc}")
            except SandboxError as exc:
                problems.append(f"{member.name}: {exc}")
            finally:
                member.reserved -= 1
        for member in self.members:
            if member.name in tried:
                continue
            if not member.up:
                problems.append(f"{member.name}: down ({member.reason})")
            elif member.free <= 0:
                problems.append(f"{member.name}: full ({member.in_use}/{member.config.max_sandboxes})")
        message = "no engine could start the sandbox: " + "; ".join(problems)
        if not tried and any(member.up for member in self.members):
            raise _Full(message)  # nothing refused it: there is only no room yet
        raise SandboxError(message)

    async def acquire(self, spec: SandboxSpec) -> Sandbox:
        """A sandbox for an episode: from the chosen engine's warm pool, else started there."""
        if self._closed:
            raise SandboxError("the fleet is closed")

        async def start(member: EngineMember) -> Sandbox:
            assert member.pool is not None
            return await member.pool.acquire(spec)

        return await self._place(spec, start)

    async def create(self, spec: SandboxSpec) -> Sandbox:
        """A fresh sandbox (grading containers), placed like an episode's, never from a pool. When
        every engine is full it waits for room (up to ``CREATE_WAIT_S``): the episode it grades has
        already run, and a capacity shortfall must not cost it its grade."""
        if self._closed:
            raise SandboxError("the fleet is closed")

        async def start(member: EngineMember) -> Sandbox:
            assert member.backend is not None
            return await member.backend.create(spec)

        return await self._place(spec, start, wait_s=CREATE_WAIT_S)

    async def attach(self, sandbox_id: str, spec: SandboxSpec, engine: str | None = None) -> Sandbox:
        """Take over a sandbox on the named engine (any engine that holds it when None)."""
        members = [self.member(engine)] if engine is not None else self.members
        problem: SandboxError = SandboxGone(f"sandbox {sandbox_id[:12]} is on no engine of this fleet")
        for member in members:
            if not member.up or member.backend is None:
                problem = EngineUnavailable(member.name, member.reason)
                continue
            try:
                return await member.backend.attach(sandbox_id, spec)
            except EngineUnavailable as exc:
                await self._confirm_down(member, exc)
                problem = exc
            except SandboxGone as exc:
                problem = exc
        raise problem

    # -- gc, close ----------------------------------------------------------------------------------

    async def gc(self, instance: str | None = None) -> int:
        """gc on every engine that answers (by ownership labels); the count removed."""
        removed = 0
        for member in self.members:
            if not member.up or member.backend is None:
                continue
            try:
                removed += await member.backend.gc(instance)
            except EngineUnavailable as exc:
                await self._confirm_down(member, exc)
        return removed

    async def close(self) -> None:
        """Stop watching, drain the pools and destroy every sandbox still held, on every engine."""
        if self._closed:
            return
        self._closed = True
        for member in self.members:
            if member.task is not None:
                member.task.cancel()
                with contextlib.suppress(BaseException):
                    await member.task
        for member in self.members:
            if member.pool is not None:
                with contextlib.suppress(Exception):
                    await member.pool.close()
            if member.backend is not None:
                with contextlib.suppress(Exception):
                    await member.backend.close()
