"""Liveness and Prometheus metrics (no token: scraped by infrastructure on a private network)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST

router = APIRouter()


@router.get("/healthz")
async def healthz(request: Request) -> dict[str, object]:
    """Alive; how many episodes it runs, its instance and URL, and whether each sandbox engine is
    up with how many sandboxes (why one is down is in the log: it may name hosts)."""
    episodes = request.app.state.gateway.episodes
    status = getattr(episodes.backend, "status", None)
    engines = [{k: v for k, v in e.items() if k != "reason"} for e in status()] if callable(status) else []
    return {
        "status": "ok",
        "live_episodes": len(episodes.live),
        "instance": episodes.leases.owner.instance,
        "url": episodes.leases.owner.url,
        "engines": engines,
    }


@router.get("/metrics", response_class=Response)
async def metrics(request: Request) -> Response:
    return Response(request.app.state.metrics.render(), media_type=CONTENT_TYPE_LATEST)
