"""How the servers (``serve``, ``policy serve``, ``mcp serve --transport http``) start.

The socket is bound first, before anything slow (a model load, a gateway's start): a port in use
is one error line and nothing claims to be ready. Then uvicorn serves on that socket (listening
from then on), and the URL is printed once, on stdout, when the application has started and
answers.
"""

from __future__ import annotations

import socket
from collections.abc import Awaitable, Callable
from typing import Any

import uvicorn

from rlguard.errors import RlguardError


def bind(host: str, port: int, what: str) -> socket.socket:
    """A TCP socket bound to ``host:port`` (0: any free port); one clear error when it cannot be."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise RlguardError(f"the {what} cannot listen on {host}:{port}: {exc.strerror}") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(
            address
        )  # listening starts with the server: until then a client is refused, not kept waiting
    except OSError as exc:
        sock.close()
        raise RlguardError(f"the {what} cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.set_inheritable(True)
    return sock


def url_of(sock: socket.socket) -> str:
    """``http://host:port`` of a bound socket (IPv6 hosts in brackets)."""
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class _AnnouncingServer(uvicorn.Server):
    """A uvicorn server that calls ``on_ready`` once its application has started."""

    def __init__(self, config: uvicorn.Config, on_ready: Callable[[], None]) -> None:
        super().__init__(config)
        self._on_ready = on_ready

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started and not self.should_exit:
            self._on_ready()


def _server(app: Any, sock: socket.socket, ready_line: str, **options: Any) -> _AnnouncingServer:
    config = uvicorn.Config(app, log_level="warning", **options)
    return _AnnouncingServer(config, lambda: print(ready_line.format(url=url_of(sock)), flush=True))


def serve(app: Any, sock: socket.socket, what: str, ready_line: str, **options: Any) -> None:
    """Serve ``app`` on ``sock`` until a signal; ``ready_line`` (``{url}`` filled in) is printed once
    it answers. A start that fails is one clear error."""
    server = _server(app, sock, ready_line, **options)
    server.run(sockets=[sock])
    if not server.started:
        raise RlguardError(f"the {what} did not start (see the log above)")


def async_server(
    sock: socket.socket, what: str, ready_line: str, **options: Any
) -> Callable[[Any], Awaitable[None]]:
    """``serve`` for a caller that already runs an event loop: a coroutine function of the app."""

    async def run(app: Any) -> None:
        server = _server(app, sock, ready_line, **options)
        await server.serve(sockets=[sock])
        if not server.started:
            raise RlguardError(f"the {what} did not start (see the log above)")

    return run
