"""The stdin/stdout of one ``docker exec`` process, over a hijacked connection to the engine, async.

Why not a unix socket in a bind-mounted directory: if the host connected to a socket file inside a
directory the agent can write, the agent could replace it with a symlink to a host socket (the
Docker socket) and make the host talk to it: a confused deputy. The exec's attach stream goes from
the host to dockerd only; nothing in the container's filesystem is ever opened by the host.

The docker SDK is synchronous, so the upgrade (``POST /exec/{id}/start`` with ``Upgrade: tcp``) is
done here on an asyncio stream; frames are Docker's 8-byte-header multiplexing (tty off).
"""

from __future__ import annotations

import asyncio
import json
import struct
from collections.abc import Callable

from sandbox.base import SandboxError
from sandbox.endpoint import EngineEndpoint

MAX_FRAME = 16 << 20
STDERR_KEPT = 4096


class ChannelClosed(SandboxError):
    """The exec process ended or broke the protocol; the channel cannot be used any more."""


class AttachedExec:
    """Line-oriented stdin/stdout of one exec process. Not safe for concurrent requests."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        closer: Callable[[], None] | None = None,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._closer = closer or writer.close
        self._stdout = bytearray()
        self.stderr_tail = b""

    @classmethod
    async def start(cls, endpoint: EngineEndpoint, api_version: str, exec_id: str) -> AttachedExec:
        """Start the created exec ``exec_id`` and keep its streams (unix, tcp with or without TLS,
        ssh). ``ConnectionError`` when the engine cannot be reached at all."""
        reader, writer, closer = await endpoint.open_stream()
        body = json.dumps({"Detach": False, "Tty": False}).encode()
        request = (
            f"POST /v{api_version}/exec/{exec_id}/start HTTP/1.1\r\n"
            "Host: docker\r\nContent-Type: application/json\r\n"
            "Connection: Upgrade\r\nUpgrade: tcp\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode() + body
        try:
            writer.write(request)
            await writer.drain()
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ConnectionError) as exc:
            closer()
            raise SandboxError(f"engine did not start the exec: {exc!r}") from exc
        status = head.split(b"\r\n", 1)[0]
        if b" 101 " not in status and b" 200 " not in status:
            closer()
            raise SandboxError(f"engine refused to attach: {status.decode(errors='replace')}")
        return cls(reader, writer, closer)

    async def send(self, data: bytes) -> None:
        """Write to the process's stdin."""
        try:
            self._writer.write(data)
            await self._writer.drain()
        except (ConnectionError, RuntimeError) as exc:
            raise ChannelClosed(f"sandbox runner is gone: {exc!r}") from exc

    async def read_line(self, max_bytes: int) -> bytes:
        """The next stdout line (without its newline); longer than ``max_bytes`` breaks the channel."""
        while True:
            end = self._stdout.find(b"\n")
            if end >= 0:
                line = bytes(self._stdout[:end])
                del self._stdout[: end + 1]
                return line
            if len(self._stdout) > max_bytes:
                raise ChannelClosed(f"sandbox runner sent a line over {max_bytes} bytes")
            await self._read_frame()

    async def _read_frame(self) -> None:
        try:
            header = await self._reader.readexactly(8)
            stream, size = header[0], struct.unpack(">I", header[4:])[0]
            if size > MAX_FRAME or stream not in (1, 2):
                raise ChannelClosed(f"bad frame from the engine (stream {stream}, {size} bytes)")
            payload = await self._reader.readexactly(size)
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            raise ChannelClosed("sandbox runner exited") from exc
        if stream == 1:
            self._stdout += payload
        else:
            self.stderr_tail = (self.stderr_tail + payload)[-STDERR_KEPT:]

    def close(self) -> None:
        """Drop the connection (the engine then closes the process's stdin)."""
        self._closer()
