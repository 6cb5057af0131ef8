"""``rlguard audit`` (intercepted calls), ``audit patches``, ``audit stats`` and ``rlguard export``.

They read the store: a database that is not there, or cannot be reached, is one error line (no
empty database is made for them).
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import typer

from rlguard.cli.output import cell, console, line, print_json, table
from rlguard.cli.serve import DATABASE_URL_HELP
from rlguard.errors import RlguardError
from rlguard.settings import get_settings

audit_app = typer.Typer(rich_markup_mode=None)  # its help is the callback's docstring


def open_database(database_url: str | None) -> Any:
    from rlguard.cli.resources import database_url as resolved_url
    from rlguard.cli.resources import open_store

    return open_store(resolved_url(get_settings(), database_url), must_exist=True)


def parse_since(value: str | None) -> datetime | None:
    """``--since``: an ISO 8601 time (UTC when it names no zone)."""
    from gateway.services.audit import parse_since as parse

    if value is None:
        return None
    try:
        return parse(value)
    except ValueError as exc:
        raise RlguardError(f"--since: {exc}") from None


def call_text(tool: str, arguments: dict[str, Any]) -> str:
    """The call as the agent made it: a bash command as written, else the tool and its path."""
    if tool == "bash" and isinstance(arguments.get("command"), str):
        return arguments["command"]
    target = arguments.get("path")
    return f"{tool} {target}" if isinstance(target, str) else tool


def rule_text(category: str | None, rule_id: str | None) -> str:
    """The category, then the rule's own name under it (rule ids start with their category)."""
    name = (rule_id or "").removeprefix(f"{category}.") if category else (rule_id or "")
    return f"{category or '-'}\n{name}" if name else category or "-"


@audit_app.callback(invoke_without_command=True)
def audit(
    ctx: typer.Context,
    category: str | None = typer.Option(None, "--category", help="Only this guard category"),
    episode: str | None = typer.Option(None, "--episode", metavar="ID", help="Only this episode id"),
    since: str | None = typer.Option(
        None, "--since", metavar="TIME", help="Only calls at or after this ISO 8601 time (UTC)"
    ),
    limit: int = typer.Option(50, "--limit", min=1, max=10_000, help="Rows to show, newest first"),
    as_json: bool = typer.Option(
        False, "--json", help="Print JSON: every field (reason, the answer the agent saw, timings)"
    ),
    database_url: str | None = typer.Option(None, "--database-url", help=DATABASE_URL_HELP),
) -> None:
    """What the guard intercepted: calls, reviewed patches, rates.

    Without a command: the intercepted tool calls, newest first. Each row: when, which episode,
    the call as the agent wrote it, the verdict and stage, the guard's category and rule. --json
    gives every field (the reason, the answer the agent saw, timings).
    """
    if ctx.invoked_subcommand is not None:
        return
    from gateway.services.audit import intercept_view
    from store.repository import InterceptFilter

    filters = InterceptFilter(category=category, episode_id=episode, since=parse_since(since))
    store = open_database(database_url)
    try:
        rows = store.intercepts(filters, limit=limit)
    finally:
        store.close()
    if as_json:
        print_json([intercept_view(item).model_dump(mode="json") for item in rows])
        return
    shown = table(title=f"intercepted calls ({len(rows)}), newest first")
    for column in ("time (UTC)", "episode", "verdict"):
        shown.add_column(column, no_wrap=True)
    shown.add_column("call", ratio=1, overflow="fold")
    shown.add_column("category / rule", no_wrap=True)
    for item in rows:
        c = item.call
        shown.add_row(
            c.created_at.strftime("%m-%d\n%H:%M:%S"),
            cell(f"{c.episode_id[:8]}\n#{c.seq}"),
            cell(f"{c.action}\n{c.stage or ''}"),
            cell(call_text(c.tool, c.arguments or {}), 240),
            cell(rule_text(c.category, c.rule_id)),
        )
    console().print(shown)


@audit_app.command("patches")
def audit_patches(
    tampering_only: bool = typer.Option(False, "--tampering", help="Only patches judged tampering"),
    limit: int = typer.Option(50, "--limit", min=1, max=10_000, help="Rows to show, newest first"),
    as_json: bool = typer.Option(False, "--json", help="Print JSON (the patches included)"),
    database_url: str | None = typer.Option(None, "--database-url", help=DATABASE_URL_HELP),
) -> None:
    """Episodes whose final patch the guard's review flagged.

    Final patches are reviewed in pytest-mode grading; --json includes the patches.
    """
    from gateway.services.audit import patch_review_view

    store = open_database(database_url)
    try:
        rows = [patch_review_view(r) for r in store.patch_reviews(tampering_only=tampering_only, limit=limit)]
    finally:
        store.close()
    if as_json:
        print_json([r.model_dump(mode="json") for r in rows])
        return
    shown = table("finished (UTC)", "episode", "task", "verdict", "reward (tests)", "findings",
                  title=f"reviewed patches ({len(rows)})")  # fmt: skip
    for r in rows:
        shown.add_row(
            r.finished_at.strftime("%m-%d %H:%M:%S") if r.finished_at else "",
            cell(r.episode_id[:8]),
            cell(r.task),
            cell(f"{r.flag} ({r.policy})"),
            f"{r.reward} ({r.graded_reward})",
            cell("\n".join(f"{f.get('rule_id')} {f.get('path')}" for f in r.findings)),
        )
    console().print(shown)


@audit_app.command("stats")
def audit_stats(
    as_json: bool = typer.Option(False, "--json", help="Print JSON"),
    database_url: str | None = typer.Option(None, "--database-url", help=DATABASE_URL_HELP),
) -> None:
    """Intercept rates per category and per policy version."""
    store = open_database(database_url)
    try:
        stats = store.intercept_stats()
    finally:
        store.close()
    if as_json:
        print_json(
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
            },
            indent=None,
        )
        return
    overall = stats.intercepted / stats.total_calls if stats.total_calls else 0.0
    out = console()
    line(f"{stats.total_calls} calls, {stats.intercepted} intercepted ({overall:.2%})")
    by_category = table("category", "intercepted", "rate of all calls", title="per category")
    for row in stats.by_category:
        by_category.add_row(cell(row.key or "(none)"), str(row.intercepted), f"{row.rate:.2%}")
    out.print(by_category)
    by_version = table("policy version", "calls", "intercepted", "rate", title="per policy version")
    for row in stats.by_policy_version:
        by_version.add_row(cell(row.key or "(none)"), str(row.calls), str(row.intercepted), f"{row.rate:.2%}")
    out.print(by_version)


EXPORT_FORMATS = ("jsonl", "parquet")


def export_cmd(
    out: Path = typer.Option(..., "--out", help="File to write"),
    fmt: str = typer.Option("jsonl", "--format", help="jsonl or parquet"),
    status: list[str] = typer.Option(
        ["finished"], "--status", help="Episode statuses to include (repeatable)"
    ),
    database_url: str | None = typer.Option(None, "--database-url", help=DATABASE_URL_HELP),
    model: str | None = typer.Option(None, "--model", help="Model id for the file metadata (runner rows)"),
    tokenizer: str | None = typer.Option(None, "--tokenizer", help="Tokenizer for the file metadata"),
) -> None:
    """Export episodes for training: one row per sub-trajectory.

    Each row holds the prompt and response token ids, the loss mask, the policy's logprobs, the
    episode's reward and, for rows the model proxy recorded, the chat messages. It says how many
    ended episodes have no row, and why.
    """
    from gateway.export import export

    if fmt not in EXPORT_FORMATS:
        raise RlguardError(f"--format must be one of {', '.join(EXPORT_FORMATS)}, not {fmt!r}")
    if not out.parent.is_dir():
        raise RlguardError(f"--out {out}: no directory {str(out.parent)!r}")
    store = open_database(database_url)
    try:
        result = export(store, out, fmt, tuple(status), model=model, tokenizer=tokenizer)  # type: ignore[arg-type]
    except OSError as exc:
        raise RlguardError(f"--out {out}: cannot write: {exc.strerror or exc}") from None
    finally:
        store.close()
    line(f"wrote {result.rows} sub-trajectories of {result.episodes} episodes to {out}")
    for reason, count in result.why_missing().most_common():
        line(f"{count} ended episode(s) have no sub-trajectory: {reason}")


def register(app: typer.Typer) -> None:
    """Add ``audit``, ``audit patches``, ``audit stats`` and ``export``."""
    app.add_typer(audit_app, name="audit")
    app.command("export")(export_cmd)
