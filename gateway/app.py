"""The gateway application: ``create_app(settings)`` wires store, sandbox pool, guard and routers.

Every collaborator can be passed in (tests give a catalog with their own task, or a backend with a
unique instance label); by default they come from settings.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.engine import make_url

from gateway.core.auth import ensure_admin_token, hash_token
from gateway.core.dbrunner import DbRunner
from gateway.core.limits import BodySizeLimit
from gateway.core.metrics import GatewayMetrics
from gateway.deps import GatewayState
from gateway.routers import (
    audit,
    audit_page,
    episode_page,
    episode_views,
    episodes,
    export,
    health,
    model_proxy,
    presence,
    tools,
)
from gateway.services.audit import AuditService
from gateway.services.calls import GuardLike
from gateway.services.catalog import GradeHook, SuiteCatalog, TaskCatalog, grade_in_task_mode, served_suites
from gateway.services.episodes import EpisodeService, PoolLike
from gateway.services.model_proxy import ModelProxy
from gateway.services.presence import PresenceWatch
from gateway.settings import GatewayEnv
from guard.judge import JudgeEvent
from guard.pipeline import Guard
from sandbox.base import SandboxBackend
from sandbox.fleet import FleetBackend
from sandbox.pool import WarmPool
from store.migrate import upgrade
from store.repository import Store

log = logging.getLogger("gateway")

SUB_TRAJECTORY_PATH = r"/v1/episodes/[^/]+/subtrajectories"
MODEL_PROXY_PATH = r"/v1/episodes/[^/]+/model/v1/.*"


def _validation_message(exc: RequestValidationError) -> str:
    """One line naming each problem, e.g. ``body.arguments.command: Field required``."""
    parts = []
    for err in exc.errors()[:5]:
        loc = ".".join(
            str(p)
            for p in err.get("loc", ())
            if p not in ("bash", "read_file", "write_file", "edit_file", "list_dir", "submit")
        )
        parts.append(f"{loc}: {err.get('msg', 'invalid')}")
    return "; ".join(parts)


async def _on_validation_error(_request: Request, exc: RequestValidationError) -> JSONResponse:
    errors = [{k: v for k, v in err.items() if k in ("loc", "msg", "type")} for err in exc.errors()[:20]]
    return JSONResponse(status_code=422, content={"detail": errors, "message": _validation_message(exc)})


async def _on_recursion_error(_request: Request, _exc: RecursionError) -> JSONResponse:
    """Input nested past the interpreter's recursion limit is the client's error, not the server's."""
    return JSONResponse(status_code=400, content={"detail": "request nested too deeply"})


def _default_guard(settings: GatewayEnv, metrics: GatewayMetrics) -> Any:
    """The guard from settings; judge outcomes feed the judge latency and error metrics."""

    def on_judge_event(event: JudgeEvent) -> None:
        if event.outcome == "failed":
            metrics.judge_errors.inc()
        if event.outcome != "cache_hit":
            metrics.judge_seconds.observe(event.latency_s)

    return Guard.from_settings(settings.guard, on_judge_event=on_judge_event)


def default_catalog(settings: GatewayEnv) -> SuiteCatalog:
    """The configured suites (``RLGUARD_GATEWAY__SUITES``; empty: built-in and registered ones)."""
    suites = served_suites(settings.gateway.suites, settings.state_dir)
    return SuiteCatalog(suites, settings.sandbox.limits, settings.sandbox.image)


def create_app(
    settings: GatewayEnv,
    *,
    catalog: TaskCatalog | None = None,
    grade: GradeHook | None = None,
    backend: SandboxBackend | None = None,
    guard: GuardLike | None = None,
) -> FastAPI:
    """The ASGI app; resources start in its lifespan (migrations, engines and their warm pools,
    recovery of lapsed leases, lease renewal, expiry). ``backend`` defaults to the fleet of the
    configured engines (``RLGUARD_SANDBOX__ENGINES``, else the one engine of ``docker_host``); a
    single backend given here gets a warm pool of its own."""
    metrics = GatewayMetrics()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:

        url = settings.resolved_database_url
        await asyncio.to_thread(upgrade, url)
        db = DbRunner(Store.from_url(url), url)
        admin_token = ensure_admin_token(settings)
        own_backend = backend is None  # close only what this app created
        sandboxes = FleetBackend.from_settings(settings) if backend is None else backend
        the_guard = _default_guard(settings, metrics) if guard is None else guard
        pool: PoolLike
        if isinstance(sandboxes, FleetBackend):
            pool = sandboxes  # a warm pool per engine, placement across them
        else:
            pool = WarmPool(sandboxes, settings.sandbox.warm_pool_size)  # type: ignore[arg-type]
        episode_service = EpisodeService(
            db=db,
            catalog=catalog or default_catalog(settings),
            grade=grade or grade_in_task_mode,
            backend=sandboxes,
            pool=pool,
            guard=the_guard,
            metrics=metrics,
            settings=settings.gateway,
            instance=settings.instance,
        )
        proxy = ModelProxy(settings.gateway, settings.state_dir, episode_service.live, db)
        episode_service.finisher.end_hooks.append(proxy.end)
        # gc spares sandboxes that running episodes (of any gateway) name: their leases may be
        # claimed and the sandbox graded; an engine that stops answering ends its episodes.
        sandboxes.retain = episode_service.sandboxes_to_keep
        if isinstance(sandboxes, FleetBackend):
            sandboxes.listeners.append(episode_service.engine_down)
            metrics.engines = sandboxes.status
        await pool.start()
        await episode_service.recover()
        watch = PresenceWatch(episode_service)
        app.state.gateway = GatewayState(
            admin_hash=hash_token(admin_token),
            episodes=episode_service,
            audit=AuditService(db),
            proxy=proxy,
            presence=watch,
        )
        loops = [
            asyncio.create_task(episode_service.run_expiry_loop(), name="rlguard-episode-expiry"),
            asyncio.create_task(episode_service.run_lease_loop(), name="rlguard-episode-leases"),
        ]
        log.info(
            "gateway ready",
            extra={
                "database": _redact(url),
                "instance": settings.instance,
                "url": settings.gateway.public_url,
            },
        )
        try:
            yield
        finally:
            for loop in loops:
                loop.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await loop
            await watch.close()
            await episode_service.shutdown()
            await proxy.aclose()
            await pool.close()
            if own_backend:
                await sandboxes.close()
            if guard is None:
                await the_guard.aclose()
            await asyncio.to_thread(db.close)

    app = FastAPI(
        title="rlguard gateway",
        version="1",
        summary="Guarded tool calls in sandboxes, with every call recorded",
        lifespan=lifespan,
    )
    app.state.metrics = metrics
    app.add_exception_handler(RequestValidationError, _on_validation_error)  # type: ignore[arg-type]
    app.add_exception_handler(RecursionError, _on_recursion_error)  # type: ignore[arg-type]
    app.include_router(health.router)
    for router in (tools.router, episodes.router, model_proxy.router, audit.router, export.router):
        app.include_router(router)
    app.include_router(episode_views.router)
    app.include_router(presence.router)
    app.include_router(audit_page.router)
    app.include_router(episode_page.router)
    app.add_middleware(
        BodySizeLimit,
        default_limit=settings.gateway.max_body_bytes,
        overrides={
            SUB_TRAJECTORY_PATH: settings.gateway.max_trajectory_body_bytes,
            MODEL_PROXY_PATH: settings.gateway.proxy_max_body_bytes,
        },
    )
    return app


def _redact(url: str) -> str:

    return make_url(url).render_as_string(hide_password=True)
