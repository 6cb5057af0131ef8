"""Liveness and Prometheus metrics (no token: scraped by infrastructure on a private network)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST

router = APIRouter()


@router.get("/healthz")
async def healthz(request: Request) -> dict[str, object]:
    return {"status": "ok", "live_episodes": len(request.app.state.gateway.episodes.live)}


@router.get("/metrics", response_class=Response)
async def metrics(request: Request) -> Response:
    return Response(request.app.state.metrics.render(), media_type=CONTENT_TYPE_LATEST)
