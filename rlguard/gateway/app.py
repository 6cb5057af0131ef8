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

from guard.judge import JudgeEvent
from guard.pipeline import Guard
from rlguard.gateway.auth import ensure_admin_token, hash_token
from rlguard.gateway.catalog import SuiteCatalog, grade_with_hidden_tests
from rlguard.gateway.dbrunner import DbRunner
from rlguard.gateway.deps import GatewayState
from rlguard.gateway.limits import BodySizeLimit
from rlguard.gateway.metrics import GatewayMetrics
from rlguard.gateway.routers import api, audit_page, health
from rlguard.gateway.services.audit import AuditService
from rlguard.gateway.services.episodes import EpisodeService, GuardLike, PoolLike
from rlguard.gateway.tasks import GradeHook, TaskCatalog
from rlguard.settings import Settings
from sandbox.base import SandboxBackend
from sandbox.docker_backend import DockerBackend
from sandbox.pool import WarmPool
from store.migrate import upgrade
from store.repository import Store

log = logging.getLogger("rlguard.gateway")

SUB_TRAJECTORY_PATH = r"/v1/episodes/[^/]+/subtrajectories"


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


def _default_guard(settings: Settings, metrics: GatewayMetrics) -> Any:
    """The guard from settings; judge outcomes feed the judge latency and error metrics."""

    def on_judge_event(event: JudgeEvent) -> None:
        if event.outcome == "failed":
            metrics.judge_errors.inc()
        if event.outcome != "cache_hit":
            metrics.judge_seconds.observe(event.latency_s)

    return Guard.from_settings(settings.guard, on_judge_event=on_judge_event)


def create_app(
    settings: Settings,
    *,
    catalog: TaskCatalog | None = None,
    grade: GradeHook | None = None,
    backend: SandboxBackend | None = None,
    guard: GuardLike | None = None,
) -> FastAPI:
    """The ASGI app; resources start in its lifespan (migrations, recovery, warm pool, expiry)."""
    metrics = GatewayMetrics()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:

        url = settings.resolved_database_url
        await asyncio.to_thread(upgrade, url)
        db = DbRunner(Store.from_url(url), url)
        admin_token = ensure_admin_token(settings)
        own_backend = backend is None  # close only what this app created
        sandboxes = DockerBackend.from_settings(settings) if backend is None else backend
        the_guard = _default_guard(settings, metrics) if guard is None else guard
        pool: PoolLike = WarmPool(sandboxes, settings.sandbox.warm_pool_size)
        episodes = EpisodeService(
            db=db,
            catalog=catalog
            or SuiteCatalog(settings.gateway.suites, settings.sandbox.limits, settings.sandbox.image),
            grade=grade or grade_with_hidden_tests,
            backend=sandboxes,
            pool=pool,
            guard=the_guard,
            metrics=metrics,
            settings=settings.gateway,
        )
        await episodes.recover()
        await pool.start()
        app.state.gateway = GatewayState(
            admin_hash=hash_token(admin_token), episodes=episodes, audit=AuditService(db)
        )
        expiry = asyncio.create_task(episodes.run_expiry_loop(), name="rlguard-episode-expiry")
        log.info("gateway ready", extra={"database": _redact(url)})
        try:
            yield
        finally:
            expiry.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await expiry
            await episodes.shutdown()
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
    app.include_router(api.router)
    app.include_router(audit_page.router)
    app.add_middleware(
        BodySizeLimit,
        default_limit=settings.gateway.max_body_bytes,
        overrides={SUB_TRAJECTORY_PATH: settings.gateway.max_trajectory_body_bytes},
    )
    return app


def _redact(url: str) -> str:

    return make_url(url).render_as_string(hide_password=True)
