"""``GET /v1/export``: ended episodes as one row per sub-trajectory, for trainers (admin only)."""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from pathlib import Path
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query
from fastapi.responses import FileResponse, Response, StreamingResponse
from starlette.background import BackgroundTask

from gateway.deps import Gateway, require_admin
from gateway.export import export, iter_rows
from gateway.routers.responses import AUTH

router = APIRouter(prefix="/v1")


ExportStatus = Literal["finished", "timed_out", "interrupted", "failed"]


@router.get(
    "/export",
    dependencies=[Depends(require_admin)],
    responses={**AUTH, 200: {"content": {"application/x-ndjson": {}, "application/vnd.apache.parquet": {}}}},
    response_class=Response,
    summary="Ended episodes as one row per sub-trajectory (JSON lines streamed, or a Parquet file)",
)
async def export_episodes(
    gw: Gateway,
    format: Literal["jsonl", "parquet"] = "jsonl",
    status: Annotated[list[ExportStatus], Query()] = ["finished"],  # noqa: B006 - FastAPI default
) -> Response:
    store = gw.episodes.db.store
    statuses = tuple(status)
    if format == "jsonl":
        rows = (json.dumps(row) + "\n" for row in iter_rows(store, statuses))
        return StreamingResponse(rows, media_type="application/x-ndjson")
    tmp = Path(tempfile.mkdtemp(prefix="rlguard-export-"))
    out = tmp / "episodes.parquet"
    await asyncio.to_thread(export, store, out, "parquet", statuses)
    return FileResponse(
        out,
        media_type="application/vnd.apache.parquet",
        filename="episodes.parquet",
        background=BackgroundTask(shutil.rmtree, tmp, ignore_errors=True),
    )
