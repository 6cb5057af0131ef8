"""Request-body size limit as plain ASGI middleware (cheap on the hot path, works for chunked bodies).

Declared ``Content-Length`` over the limit is refused before reading; a streamed body is counted
and refused as soon as it passes the limit, before the endpoint runs, so nothing is recorded.
"""

from __future__ import annotations

import json
import re
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send


class BodySizeLimit:
    """413 for bodies over ``default_limit`` bytes (``overrides``: path regex -> larger limit)."""

    def __init__(self, app: ASGIApp, default_limit: int, overrides: dict[str, int] | None = None) -> None:
        self.app = app
        self.default_limit = default_limit
        self.overrides = [(re.compile(pattern), limit) for pattern, limit in (overrides or {}).items()]

    def _limit_for(self, path: str) -> int:
        for pattern, limit in self.overrides:
            if pattern.fullmatch(path):
                return limit
        return self.default_limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self._limit_for(scope["path"])
        for name, value in scope["headers"]:
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = 0
                if declared > limit:
                    await _send_413(send, limit)
                    return
        received = 0
        rejected = False

        async def counting_receive() -> Message:
            nonlocal received, rejected
            if rejected:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    # Answer now and tell the app the client left: whatever it does next (FastAPI
                    # turns a failed body read into its own error) is dropped by guarded_send.
                    rejected = True
                    await _send_413(send, limit)
                    return {"type": "http.disconnect"}
            return message

        async def guarded_send(message: Message) -> None:
            if not rejected:
                await send(message)

        await self.app(scope, counting_receive, guarded_send)


async def _send_413(send: Send, limit: int) -> None:
    body: dict[str, Any] = {"detail": f"request body is larger than the limit of {limit} bytes"}
    payload = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})
