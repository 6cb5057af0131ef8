"""Command-line sub-commands of this package (registered into ``rlguard.cli``):
``serve``, ``db upgrade``, ``audit``, ``audit stats``, ``export`` and ``bench gateway``.

Imports inside the commands keep ``rlguard --version`` and ``--help`` fast: docker, torch,
SQLAlchemy and the packages behind them load only for the command that runs.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from rlguard.errors import RlguardError
from rlguard.settings import Settings
from sandbox.textsafe import terminal_safe

console = Console()


def shown(value: str | None, limit: int | None = None) -> Text:
    """A stored (agent-controlled) string as a table cell: controls made visible, no Rich markup."""
    text = value or ""
    return Text(terminal_safe(text[:limit] if limit else text))


def _store():
    from rlguard.settings import get_settings
    from store.migrate import upgrade
    from store.repository import Store

    url = get_settings().resolved_database_url
    upgrade(url)
    return Store.from_url(url)


def parse_since(value: str | None) -> datetime | None:
    from rlguard.gateway.services.audit import parse_since as parse

    if value is None:
        return None
    try:
        return parse(value)
    except ValueError as exc:
        raise RlguardError(f"--since: {exc}") from exc


def preflight(settings: Settings) -> None:
    """Fail with one clear line (not a lifespan traceback) when the engine or the database is unusable."""
    import docker
    from sqlalchemy.exc import SQLAlchemyError

    from sandbox.docker_backend import resolve_docker_host
    from store.migrate import upgrade

    host = resolve_docker_host(settings.docker_host)
    try:
        client = docker.DockerClient(base_url=host, timeout=10)
        client.ping()
        client.close()
    except docker.errors.DockerException as exc:
        raise RlguardError(f"no Docker engine answers at {host}: {exc}") from exc
    try:
        upgrade(settings.resolved_database_url)
    except SQLAlchemyError as exc:
        raise RlguardError(
            f"cannot migrate the database: {exc.__class__.__name__}: {exc.orig or exc}"
        ) from exc


def serve(
    host: str | None = typer.Option(None, help="Listen address (default: settings.gateway.host)"),
    port: int | None = typer.Option(None, help="Listen port (default: settings.gateway.port)"),
) -> None:
    """Run the gateway (HTTP API, audit page, metrics) until interrupted."""
    import uvicorn

    from rlguard.gateway.app import create_app
    from rlguard.gateway.logs import configure_json_logging
    from rlguard.settings import get_settings

    settings = get_settings()
    preflight(settings)
    configure_json_logging()
    uvicorn.run(
        create_app(settings),
        host=host or settings.gateway.host,
        port=port or settings.gateway.port,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=10,
    )


def db_upgrade() -> None:
    """Create or migrate the database schema to the newest revision."""
    from rlguard.settings import get_settings
    from store.migrate import current_revision, upgrade

    url = get_settings().resolved_database_url
    upgrade(url)
    console.print(f"database at revision {current_revision(url)}")


audit_app = typer.Typer(help="Intercepted tool calls: a table, or rates with 'stats'.")


@audit_app.callback(invoke_without_command=True)
def audit(
    ctx: typer.Context,
    category: str | None = typer.Option(None, help="Only this guard category"),
    episode: str | None = typer.Option(None, help="Only this episode id"),
    since: str | None = typer.Option(None, help="Only calls at or after this ISO 8601 time (UTC)"),
    limit: int = typer.Option(50, min=1, max=10_000, help="Rows to show, newest first"),
) -> None:
    """Print intercepted calls (verdict, stage, rule, reason, the decoy shown)."""
    if ctx.invoked_subcommand is not None:
        return
    from store.repository import InterceptFilter

    store = _store()
    try:
        rows = store.intercepts(
            InterceptFilter(category=category, episode_id=episode, since=parse_since(since)), limit=limit
        )
    finally:
        store.close()
    table = Table(title=f"intercepted calls ({len(rows)})", show_lines=True)
    for column in (
        "time (UTC)",
        "episode",
        "tool",
        "call",
        "action",
        "stage",
        "category",
        "rule",
        "reason",
        "agent saw",
    ):
        table.add_column(column, overflow="fold")
    for item in rows:
        c = item.call
        table.add_row(
            c.created_at.strftime("%Y-%m-%d %H:%M:%S"),
            shown(f"{c.episode_id[:12]} #{c.seq}"),
            shown(c.tool),
            shown(c.normalized, 200),
            shown(c.action),
            shown(c.stage),
            shown(c.category),
            shown(c.rule_id),
            shown(c.reason, 200),
            shown(c.answer_output, 200),
        )
    console.print(table)


@audit_app.command("patches")
def audit_patches(
    tampering_only: bool = typer.Option(False, "--tampering", help="Only patches judged tampering"),
    limit: int = typer.Option(50, min=1, max=10_000, help="Rows to show, newest first"),
    as_json: bool = typer.Option(False, "--json", help="Print JSON (patches included)"),
) -> None:
    """Episodes whose final patch the guard's review flagged (pytest-mode grading)."""
    from rlguard.gateway.services.audit import patch_review_view

    store = _store()
    try:
        rows = [patch_review_view(r) for r in store.patch_reviews(tampering_only=tampering_only, limit=limit)]
    finally:
        store.close()
    if as_json:
        typer.echo(json.dumps([r.model_dump(mode="json") for r in rows], indent=2))
        return
    table = Table(title=f"reviewed patches ({len(rows)})", show_lines=True)
    for column in ("finished (UTC)", "episode", "task", "verdict", "reward (tests)", "findings"):
        table.add_column(column, overflow="fold")
    for r in rows:
        table.add_row(
            r.finished_at.strftime("%Y-%m-%d %H:%M:%S") if r.finished_at else "",
            r.episode_id[:12],
            r.task,
            f"{r.flag} ({r.policy})",
            f"{r.reward} ({r.graded_reward})",
            "\n".join(f"{f['rule_id']} {f['path']}" for f in r.findings),
        )
    console.print(table)


@audit_app.command("stats")
def audit_stats(as_json: bool = typer.Option(False, "--json", help="Print JSON")) -> None:
    """Intercept rates per category and per policy version."""
    store = _store()
    try:
        stats = store.intercept_stats()
    finally:
        store.close()
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "total_calls": stats.total_calls,
                    "intercepted": stats.intercepted,
                    "by_category": {
                        r.key or "": {"intercepted": r.intercepted, "rate": r.rate} for r in stats.by_category
                    },
                    "by_policy_version": {
                        r.key or "": {"calls": r.calls, "intercepted": r.intercepted, "rate": r.rate}
                        for r in stats.by_policy_version
                    },
                }
            )
        )
        return
    overall = stats.intercepted / stats.total_calls if stats.total_calls else 0.0
    console.print(f"{stats.total_calls} calls, {stats.intercepted} intercepted ({overall:.2%})")
    by_cat = Table(title="per category")
    for column in ("category", "intercepted", "rate of all calls"):
        by_cat.add_column(column)
    for row in stats.by_category:
        by_cat.add_row(shown(row.key or "(none)"), str(row.intercepted), f"{row.rate:.2%}")
    console.print(by_cat)
    by_pv = Table(title="per policy version")
    for column in ("policy version", "calls", "intercepted", "rate"):
        by_pv.add_column(column)
    for row in stats.by_policy_version:
        by_pv.add_row(shown(row.key or "(none)"), str(row.calls), str(row.intercepted), f"{row.rate:.2%}")
    console.print(by_pv)


def export_cmd(
    fmt: str = typer.Option("jsonl", "--format", help="jsonl or parquet"),
    out: Path = typer.Option(..., "--out", help="Output file"),
    status: list[str] = typer.Option(["finished"], "--status", help="Episode statuses to include"),
) -> None:
    """Export episodes as one row per sub-trajectory (token ids, action mask, logprobs, reward)."""
    from rlguard.gateway.export import export

    if fmt not in ("jsonl", "parquet"):
        raise RlguardError(f"--format must be jsonl or parquet, not {fmt!r}")
    store = _store()
    try:
        count = export(store, out, fmt, tuple(status))  # type: ignore[arg-type]
    finally:
        store.close()
    console.print(f"wrote {count} sub-trajectories to {out}")


def bench_gateway(
    as_json: bool = typer.Option(False, "--json", help="Print JSON"),
    calls: int = typer.Option(300, min=20, help="Sequential calls for the latency percentiles"),
    concurrent_calls: int = typer.Option(40, min=5, help="Calls per episode in the 16-episode run"),
) -> dict[str, Any]:
    """Tool-call round trip (HTTP + guard + store + sandbox) beside raw docker exec; 16-episode calls/s."""
    from rlguard.gateway.bench import run_bench

    return run_bench(calls=calls, concurrent_calls=concurrent_calls)


def register(app: typer.Typer, bench: typer.Typer) -> None:
    """Add this package's commands to the root app and its benchmark to ``rlguard bench``."""
    app.command("serve")(serve)
    db_app = typer.Typer(help="Database schema (Alembic migrations).", no_args_is_help=True)
    db_app.command("upgrade")(db_upgrade)
    app.add_typer(db_app, name="db")
    app.add_typer(audit_app, name="audit")
    app.command("export")(export_cmd)
    bench.command("gateway")(bench_gateway)
