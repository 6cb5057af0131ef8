"""``rlguard mcp serve``: the episode's tools as an MCP server (official ``mcp`` SDK, low-level API).

One MCP session is one gateway episode: over stdio the session is the process, over streamable
HTTP it is the ``Mcp-Session-Id`` the SDK hands out. The gateway episode is created on the
session's first tool call, every call goes through ``POST /v1/episodes/{id}/calls`` (so it is
guarded, recorded and audited as any HTTP call), and ``submit`` or the end of the session (EOF on
stdio, ``DELETE`` or idle expiry over HTTP, server shutdown) finishes it: graded and recorded.

The tools are the gateway's own (``GET /v1/tools``): same names, descriptions and JSON schemas.
Results are one text block rendered by ``render_answer``, identical for real and decoyed calls.

The session's episode is also a resource, ``rlguard://episode`` (JSON: episode id, task, the model
base URL and the API key of the episode's recording model proxy). Reading it starts the episode, so
a harness can point its model at the proxy before its first turn; then its turns train too.

Over HTTP the server advertises only the handshake protocol versions on ``server/discover``: a
2026-era HTTP request carries no session, and an episode needs one. Clients in ``auto`` mode (the
SDK's default) then fall back to the ``initialize`` handshake, as they do with any 2025 server.
Over stdio both eras work: the process is the session.

Over HTTP, sessions and episodes (sandboxes) are capped per client and in all
(``rlguard.integrations.mcp_limits``): a client over a cap gets a clear error, nothing is created.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rlguard.integrations.episode import Episode, EpisodeEnded, GatewayTarget, render_answer
from rlguard.integrations.mcp_limits import CapReached, Ledger, McpLimits, SessionCaps
from rollout.gateway_client import GatewayClient, GatewayError

log = logging.getLogger(__name__)

STDIO_SESSION = "stdio"
EPISODE_RESOURCE = "rlguard://episode"
SESSION_HEADER = "mcp-session-id"
DEFAULT_IDLE_TIMEOUT_S = 600.0


class Episodes:
    """The episodes of the open MCP sessions, by session key."""

    def __init__(self, task: str, policy_version: str | None, ledger: Ledger | None = None) -> None:
        self.task = task
        self.policy_version = policy_version
        self.client: GatewayClient | None = None
        #: Counts episodes per client against the caps (HTTP); None over stdio (one session).
        self.ledger = ledger
        self._open: dict[str, Episode] = {}
        self._last_used: dict[str, float] = {}

    def get(self, key: str, client: str = "local") -> Episode:
        """The session's episode, made on first use; CapReached when ``client`` is at a cap."""
        if self.client is None:
            raise RuntimeError("the MCP server is not running (no gateway client)")
        episode = self._open.get(key)
        if episode is None:
            if self.ledger is not None:
                self.ledger.open_episode(key, client)
            episode = self._open[key] = Episode(self.client, self.task, self.policy_version)
        self._last_used[key] = time.monotonic()
        return episode

    def release(self, key: str) -> None:
        """The session's episode has ended (its sandbox is gone): its slot no longer counts."""
        if self.ledger is not None:
            self.ledger.close_episode(key)

    async def end(self, key: str, end_reason: str | None = None) -> None:
        """Finish the session's episode (graded) and forget the session."""
        episode = self._open.pop(key, None)
        self._last_used.pop(key, None)
        if self.ledger is not None:
            self.ledger.close_episode(key)
        if episode is None:
            return
        try:
            await episode.finish(end_reason)
        except GatewayError as exc:  # the session is gone either way; the gateway's sweep ends the rest
            log.warning("could not finish episode %s: %s", episode.episode_id, exc)

    async def end_idle(self, idle_s: float) -> None:
        now = time.monotonic()
        for key in [k for k, t in self._last_used.items() if now - t > idle_s]:
            await self.end(key)

    async def end_all(self) -> None:
        for key in list(self._open):
            await self.end(key)


def mcp_tools(openai_tools: list[dict[str, Any]]) -> list[types.Tool]:
    """The gateway's OpenAI-style tool schemas as MCP tools: same name, description, JSON schema."""
    return [
        types.Tool(
            name=t["function"]["name"],
            description=t["function"].get("description"),
            input_schema=t["function"]["parameters"],
        )
        for t in openai_tools
    ]


def _session_key(ctx: Any) -> tuple[str, str]:
    """(session key, client) of a request: over stdio the process is both."""
    request = ctx.request
    if request is None:  # stdio: the process is the session
        return STDIO_SESSION, "local"
    key = request.headers.get(SESSION_HEADER)
    if not key:
        raise MCPError(
            types.INVALID_REQUEST,
            "rlguard runs one episode per MCP session: open a session with the initialize handshake",
        )
    return key, request.client.host if request.client else "local"


def build_server(
    episodes: Episodes, target: GatewayTarget, tools: list[types.Tool], instructions: str | None
) -> Server[Episodes]:
    """The low-level MCP server; its lifespan owns the gateway client and ends every open episode."""
    names = {t.name for t in tools}

    @contextlib.asynccontextmanager
    async def lifespan(_server: Server[Episodes]) -> AsyncIterator[Episodes]:
        async with GatewayClient(target.url, target.admin_token) as client:
            episodes.client = client
            try:
                yield episodes
            finally:
                with anyio.CancelScope(shield=True):
                    await episodes.end_all()
                episodes.client = None

    async def list_tools(_ctx: Any, _params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        if params.name not in names:
            raise MCPError(
                types.INVALID_PARAMS, f"unknown tool {params.name!r}; the tools are {sorted(names)}"
            )
        key, client = _session_key(ctx)
        try:
            episode = episodes.get(key, client)
        except CapReached as exc:
            raise MCPError(types.INVALID_REQUEST, str(exc)) from None
        try:
            result = await episode.call(params.name, dict(params.arguments or {}))
        except EpisodeEnded as exc:
            return types.CallToolResult(content=[types.TextContent(text=str(exc))], is_error=True)
        except GatewayError as exc:
            raise MCPError(types.INTERNAL_ERROR, f"the gateway failed the call: {exc}") from exc
        finally:
            if episode.ended:  # submitted or ended at the gateway: its sandbox is gone, so is its slot
                episodes.release(key)
        if result.rejected:  # bad arguments (422): the gateway's message, as an error the model can fix
            return types.CallToolResult(content=[types.TextContent(text=result.output)], is_error=True)
        text = render_answer(result.output, result.exit_code, result.truncated)
        return types.CallToolResult(content=[types.TextContent(text=text)])

    async def list_resources(_ctx: Any, _params: Any) -> types.ListResourcesResult:
        resource = types.Resource(
            uri=EPISODE_RESOURCE,
            name="episode",
            description="This session's episode: id, task, and the model base URL and API key of its "
            "recording model proxy (reading it starts the episode)",
            mime_type="application/json",
        )
        return types.ListResourcesResult(resources=[resource])

    async def read_resource(ctx: Any, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        if params.uri != EPISODE_RESOURCE:
            raise MCPError(
                types.INVALID_PARAMS, f"unknown resource {params.uri!r}; there is {EPISODE_RESOURCE}"
            )
        episode = episodes.get(_session_key(ctx))
        try:
            handle = await episode.start()
        except EpisodeEnded as exc:
            raise MCPError(types.INVALID_REQUEST, str(exc)) from exc
        except GatewayError as exc:
            raise MCPError(types.INTERNAL_ERROR, f"the gateway could not start the episode: {exc}") from exc
        body = {
            "episode_id": handle.episode_id,
            "task": episodes.task,
            "model_base_url": f"{target.url}/v1/episodes/{handle.episode_id}/model/v1",
            "api_key": handle.agent_token,
        }
        contents = types.TextResourceContents(
            uri=EPISODE_RESOURCE, mime_type="application/json", text=json.dumps(body)
        )
        return types.ReadResourceResult(contents=[contents])

    server: Server[Episodes] = Server(
        "rlguard",
        version=_version(),
        instructions=instructions,
        lifespan=lifespan,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_read_resource=read_resource,
    )
    return server


def _version() -> str:
    from rlguard import __version__

    return __version__


async def serve_stdio(server: Server[Episodes]) -> None:
    """Serve one session on stdin/stdout; EOF ends it (and the lifespan finishes its episode)."""
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


class _EndSessionOnDelete:
    """ASGI wrapper: a client's ``DELETE`` of its session finishes that session's episode."""

    def __init__(self, app: ASGIApp, episodes: Episodes) -> None:
        self.app = app
        self.episodes = episodes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "DELETE":
            await self.app(scope, receive, send)
            return
        key = next((v.decode("latin-1") for k, v in scope["headers"] if k == SESSION_HEADER.encode()), None)
        status = 0

        async def watch(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        await self.app(scope, receive, watch)
        if key and 200 <= status < 300:
            await self.episodes.end(key)


def http_app(
    server: Server[Episodes], episodes: Episodes, host: str, idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S
) -> ASGIApp:
    """The streamable-HTTP app at ``/mcp``; sessions idle longer than ``idle_timeout_s`` end."""

    async def discover(ctx: Any, _params: Any) -> types.DiscoverResult:
        return types.DiscoverResult(
            supported_versions=list(HANDSHAKE_PROTOCOL_VERSIONS),
            capabilities=server.get_capabilities(protocol_version=ctx.protocol_version),
            instructions=server.instructions,
        )

    server.add_request_handler("server/discover", types.RequestParams, discover)
    # JSON answers, not an SSE stream per POST: the server sends nothing while a call runs
    app = server.streamable_http_app(host=host, session_idle_timeout=idle_timeout_s, json_response=True)
    inner_lifespan = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(app_: Any) -> AsyncIterator[None]:
        async with inner_lifespan(app_), anyio.create_task_group() as tg:

            async def reap() -> None:
                while True:
                    await anyio.sleep(min(30.0, idle_timeout_s / 4))
                    await episodes.end_idle(idle_timeout_s)

            tg.start_soon(reap)
            yield
            tg.cancel_scope.cancel()

    app.router.lifespan_context = lifespan
    wrapped: ASGIApp = _EndSessionOnDelete(app, episodes)
    return SessionCaps(wrapped, episodes.ledger) if episodes.ledger is not None else wrapped


def run(
    target: GatewayTarget,
    task: str,
    *,
    transport: str = "stdio",
    host: str = "127.0.0.1",
    port: int = 8766,
    policy_version: str | None = None,
    idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
    http_server: Callable[[ASGIApp], Awaitable[None]] | None = None,
    limits: McpLimits | None = None,
) -> None:
    """Serve ``task``'s episodes over ``transport`` until stdin closes (stdio) or a signal (http).

    ``http_server`` serves the HTTP app when given (the command line's, on a socket it bound
    first); by default uvicorn listens on ``host:port``. Over http, ``limits`` caps sessions and
    episodes per client and in all (defaults: ``McpLimits()``)."""
    from rlguard.integrations.episode import check_task

    async def main() -> None:
        async with GatewayClient(target.url, target.admin_token) as client:
            info = await check_task(client, task)
            tools = mcp_tools(await client.tools())
        ledger = None if transport == "stdio" else Ledger(limits or McpLimits(), idle_timeout_s)
        episodes = Episodes(task, policy_version, ledger)
        server = build_server(episodes, target, tools, info.get("instructions"))
        if transport == "stdio":
            await serve_stdio(server)
            return
        app = http_app(server, episodes, host, idle_timeout_s)
        if http_server is not None:
            await http_server(app)
            return
        import uvicorn

        config = uvicorn.Config(app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=10)
        await uvicorn.Server(config).serve()

    anyio.run(main, backend_options={"use_uvloop": True})
