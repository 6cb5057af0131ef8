"""The tools the agent sees and the tasks the gateway serves."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Depends

from contract.tools import openai_tools
from gateway.deps import Gateway, require_admin
from gateway.routers.responses import AUTH
from gateway.schemas import TaskView

router = APIRouter(prefix="/v1")


@router.get("/tools", summary="The tools the agent sees (OpenAI function-calling schemas)")
async def list_tools() -> list[dict[str, Any]]:
    return openai_tools()


@router.get("/tasks", dependencies=[Depends(require_admin)], responses=AUTH)
async def list_tasks(gw: Gateway) -> list[TaskView]:
    return [
        TaskView(id=t.id, suite=t.suite, instructions=t.instructions, image=t.image, details=t.details)
        for t in await asyncio.to_thread(gw.episodes.catalog.list_tasks)  # may build workspace tars
    ]
