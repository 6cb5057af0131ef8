"""``rlguard mcp serve`` and ``rlguard bench mcp`` (registered into ``rlguard.cli``)."""

from __future__ import annotations

from typing import Any

import typer

from rlguard.errors import RlguardError

mcp_app = typer.Typer(help="MCP server: one task's episodes for any MCP client.", no_args_is_help=True)
TRANSPORTS = ("stdio", "http")


@mcp_app.command("serve")
def serve(
    task: str = typer.Option(..., "--task", help="Task id within the suite, e.g. matrix-transpose"),
    suite: str = typer.Option("builtin", "--suite", help="Suite: a built-in name or a directory"),
    transport: str = typer.Option("stdio", "--transport", help="stdio (one session) or http (/mcp)"),
    host: str = typer.Option("127.0.0.1", "--host", help="Listen address (http)"),
    port: int = typer.Option(8766, "--port", min=1, max=65535, help="Listen port (http)"),
    gateway: str | None = typer.Option(
        None,
        "--gateway",
        envvar="RLGUARD_GATEWAY_URL",
        help="URL of a running gateway; default: one served in this process",
    ),
    policy_version: str | None = typer.Option(None, "--policy-version", help="Recorded on each episode"),
    idle_timeout: float = typer.Option(
        600.0, "--idle-timeout", min=1.0, help="Seconds before an idle http session ends"
    ),
) -> None:
    """Serve the task's tools over MCP; each MCP session is one guarded, recorded, graded episode."""
    from rlguard.integrations import mcp_server
    from rlguard.integrations.episode import gateway_target, task_ref
    from rlguard.settings import get_settings

    if transport not in TRANSPORTS:
        raise RlguardError(f"--transport must be one of {', '.join(TRANSPORTS)}, not {transport!r}")
    ref = task_ref(suite, task)
    settings = get_settings()
    if gateway is None:
        from rlguard.gateway.cli import preflight

        preflight(settings)
    suites = () if suite == "builtin" else (suite,)
    with gateway_target(gateway, settings, suites=suites) as target:
        mcp_server.run(
            target,
            ref,
            transport=transport,
            host=host,
            port=port,
            policy_version=policy_version,
            idle_timeout_s=idle_timeout,
        )


def bench_mcp(
    as_json: bool = typer.Option(False, "--json", help="Print JSON"),
    calls: int = typer.Option(200, min=20, help="Sequential calls per path for the percentiles"),
) -> dict[str, Any]:
    """A tool call through the MCP server (stdio and http) beside the same call through the HTTP API."""
    from rlguard.integrations.bench import run_bench

    return run_bench(calls=calls)


def register(app: typer.Typer, bench: typer.Typer) -> None:
    """Add ``rlguard mcp`` and ``rlguard bench mcp``."""
    app.add_typer(mcp_app, name="mcp")
    bench.command("mcp")(bench_mcp)
