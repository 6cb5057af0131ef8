"""``rlguard mcp serve``: one task's tools over MCP; each MCP session is one episode."""

from __future__ import annotations

import contextlib
import socket

import typer

from rlguard.cli.output import group
from rlguard.cli.tasks import SUITE_HELP
from rlguard.errors import RlguardError
from rlguard.settings import get_settings

mcp_app = group("MCP server: one task's episodes for any MCP client.")
TRANSPORTS = ("stdio", "http")


@mcp_app.command("serve")
def serve(
    task: str = typer.Option(..., "--task", help="Task id within the suite, e.g. matrix-transpose"),
    suite: str = typer.Option("builtin", "--suite", help=SUITE_HELP),
    transport: str = typer.Option("stdio", "--transport", help="stdio (one session) or http (at /mcp)"),
    host: str = typer.Option("127.0.0.1", "--host", help="Listen address (http)"),
    port: int = typer.Option(8766, "--port", min=0, max=65535, help="Listen port; 0 picks a free one (http)"),
    gateway_url: str | None = typer.Option(
        None,
        "--gateway-url",
        envvar="RLGUARD_GATEWAY_URL",
        help="A running gateway (default: one served in this process)",
    ),
    policy_version: str | None = typer.Option(None, "--policy-version", help="Recorded on each episode"),
    idle_timeout: float = typer.Option(
        600.0, "--idle-timeout", min=1.0, help="Seconds before an idle http session ends"
    ),
    max_sessions_per_client: int = typer.Option(16, "--max-sessions-per-client", min=1, help="http"),
    max_sessions: int = typer.Option(64, "--max-sessions", min=1, help="http: all clients together"),
    max_episodes_per_client: int = typer.Option(
        8, "--max-episodes-per-client", min=1, help="http: running episodes (sandboxes) per client"
    ),
    max_episodes: int = typer.Option(32, "--max-episodes", min=1, help="http: all clients together"),
) -> None:
    """Serve a task's tools over MCP.

    Each MCP session is one guarded, recorded, graded episode. Over http it prints its URL once
    it answers.
    """
    from rlguard.cli import serving
    from rlguard.cli.resources import check_engine_and_database, resolve_suite
    from rlguard.cli.rollout import chosen_tasks
    from rlguard.integrations import mcp_server
    from rlguard.integrations.episode import gateway_target, task_ref
    from rlguard.integrations.mcp_limits import McpLimits

    if transport not in TRANSPORTS:
        raise RlguardError(f"--transport must be one of {', '.join(TRANSPORTS)}, not {transport!r}")
    settings = get_settings()
    directory = resolve_suite(settings, suite)
    ref = task_ref(directory.name, task)
    chosen_tasks((str(directory),), [task])
    with contextlib.ExitStack() as stack:
        http_server = None
        if transport == "http":
            sock: socket.socket = stack.enter_context(serving.bind(host, port, "MCP server"))
            ready = f"rlguard MCP server for {ref} at {{url}}/mcp"
            http_server = serving.async_server(sock, "MCP server", ready, timeout_graceful_shutdown=10)
        if gateway_url is None:
            check_engine_and_database(settings)
        target = stack.enter_context(gateway_target(gateway_url, settings, suites=(str(directory),)))
        mcp_server.run(
            target,
            ref,
            transport=transport,
            policy_version=policy_version,
            idle_timeout_s=idle_timeout,
            http_server=http_server,
            limits=McpLimits(max_sessions_per_client, max_sessions, max_episodes_per_client, max_episodes),
        )


def register(app: typer.Typer) -> None:
    """Add ``rlguard mcp``."""
    app.add_typer(mcp_app, name="mcp")
