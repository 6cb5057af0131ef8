"""``rlguard episodes list`` and ``rlguard episodes show ID``: the store's episodes as a person reads
them (how each ended, its reward, whether it can train; one episode turn by turn).

Both read the store directly, like ``rlguard audit`` (the gateway need not run); ``--json`` prints
the same objects as ``GET /v1/episodes`` and ``GET /v1/episodes/{id}/trajectory``. Stored strings
are agent-controlled: they are printed with control characters made visible, never as markup.
"""

from __future__ import annotations

import json
from typing import Any

import typer

from rlguard.cli.audit import open_database, parse_since
from rlguard.cli.output import cell, console, group, line, print_json, table
from rlguard.cli.serve import DATABASE_URL_HELP
from rlguard.errors import RlguardError

episodes_app = group("Episodes: a list, or one turn by turn.")


@episodes_app.command("list")
def list_episodes(
    status: str | None = typer.Option(None, help="running, finished, timed_out, interrupted or failed"),
    task: str | None = typer.Option(None, help="Only this task (suite/task_id)"),
    policy_version: str | None = typer.Option(None, "--policy-version", help="Only this policy version"),
    since: str | None = typer.Option(None, help="Only episodes started at or after this ISO 8601 time"),
    trainable: bool | None = typer.Option(
        None, "--trainable/--audit-only", help="Only episodes with sub-trajectories / without any"
    ),
    limit: int = typer.Option(50, min=1, max=10_000, help="Rows to show, newest first"),
    offset: int = typer.Option(0, min=0, help="Rows to skip (the next page)"),
    database_url: str | None = typer.Option(None, "--database-url", help=DATABASE_URL_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print JSON"),
) -> None:
    """Episodes, newest first.

    Each row: task, status, reward, end reason, calls, intercepts, training rows and drift.
    """
    from gateway.services.episode_views import summary
    from store.repository import EpisodeFilter

    filters = EpisodeFilter(
        status=status, task=task, policy_version=policy_version, since=parse_since(since), trainable=trainable
    )
    store = open_database(database_url)
    try:
        items = [summary(r) for r in store.list_episodes(filters, limit=limit, offset=offset)]
    finally:
        store.close()
    if as_json:
        print_json([i.model_dump(mode="json") for i in items])
        return
    shown = table(
        "episode", "task", "status", "reward", "end", "calls", "intercepts", "rows", "drift", "started (UTC)",
        title=f"episodes ({len(items)})",
    )  # fmt: skip
    for i in items:
        rows = str(i.sub_trajectories) if i.sub_trajectories or not i.audit_only else "audit-only"
        shown.add_row(
            i.episode_id, cell(i.task), i.status, "-" if i.reward is None else f"{i.reward:.3f}",
            cell(i.end_reason or ""), str(i.num_calls), str(i.intercepts), rows,
            "" if i.drift is None else str(i.drift), i.created_at.strftime("%Y-%m-%d %H:%M:%S"),
        )  # fmt: skip
    console().print(shown)
    if len(items) == limit:
        line(f"more: --offset {offset + limit}")


def _resolve(store: Any, prefix: str) -> str:
    from store.repository import EpisodeFilter

    found = store.list_episodes(EpisodeFilter(id_prefix=prefix), limit=2)
    if not found:
        raise RlguardError(f"no episode {prefix!r}")
    if len(found) > 1 and found[0].episode.id != prefix:
        raise RlguardError(f"{prefix!r} names several episodes; give more of the id")
    return found[0].episode.id


def _decoder(tokenizer: str | None) -> Any:
    if tokenizer is None:
        return None
    from transformers import AutoTokenizer

    from rlguard.settings import get_settings
    from rollout.tinymodel import resolve_model_name

    try:
        loaded = AutoTokenizer.from_pretrained(resolve_model_name(tokenizer, get_settings().state_dir))
    except (OSError, ValueError) as exc:
        raise RlguardError(f"--tokenizer {tokenizer!r}: {exc}") from exc
    return lambda ids: loaded.decode(ids, skip_special_tokens=False)


@episodes_app.command("show")
def show_episode(
    episode_id: str = typer.Argument(..., help="An episode id (or the start of one)"),
    tokenizer: str | None = typer.Option(
        None, "--tokenizer", help="HF directory or 'tiny': decode turns the model proxy did not record"
    ),
    full: bool = typer.Option(False, "--full", help="Print whole texts, not their first lines"),
    database_url: str | None = typer.Option(None, "--database-url", help=DATABASE_URL_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print JSON"),
) -> None:
    """One episode turn by turn.

    The model's text and tool calls, each gateway call with its verdict and what the agent saw,
    the reward with the tests.
    """
    from gateway.services.episode_views import trajectory

    store = open_database(database_url)
    try:
        row = store.episode(_resolve(store, episode_id), with_children=True)
    finally:
        store.close()
    view = trajectory(row, _decoder(tokenizer))
    if as_json:
        print_json(view.model_dump(mode="json"))
        return
    limit = None if full else 300
    e = view.episode
    reward = "-" if e.reward is None else f"{e.reward:.3f}"
    head = f"episode {e.episode_id}  task {e.task}  status {e.status}  reward {reward}  "
    line(head + f"end {e.end_reason or '-'}  policy {e.policy_version or '-'}")
    if e.audit_only:
        line(f"audit-only: {e.audit_only}")
    if view.model_proxy:
        p = view.model_proxy
        line(
            f"model proxy: {p.get('turns')} turns, {p.get('sub_trajectories')} sub-trajectories, "
            f"drift {p.get('drift')}, rewrites {p.get('rewrites')}, tool calls "
            f"{p.get('tool_calls_matched')}/{p.get('tool_calls')} matched"
        )
    if view.tests:
        tests = table("test", "outcome", title="hidden tests")
        for name, outcome in view.tests.items():
            tests.add_row(cell(name), cell(outcome))
        console().print(tests)
    turns = table(
        "sub", "kind", "tokens (prompt+generated)", "text", "tool calls -> gateway call", title="model turns"
    )
    turns.show_lines = True
    for sub in view.sub_trajectories:
        for turn in sub.turns:
            seqs = turn.gateway_seqs or [None] * len(turn.tool_calls)
            calls = "\n".join(
                f"{c.get('name')} {json.dumps(c.get('arguments'))[:200]} -> "
                f"{'#' + str(seq) if seq is not None else 'no gateway call'}"
                for c, seq in zip(turn.tool_calls, seqs, strict=False)
            )
            turns.add_row(
                str(sub.index), turn.kind, f"{turn.prompt_tokens}+{turn.generated_tokens}",
                cell(turn.text, limit), cell(calls),
            )  # fmt: skip
    console().print(turns)
    calls = table(
        "#", "tool", "call", "verdict", "what the agent saw", "would have touched", title="gateway calls"
    )
    calls.show_lines = True
    for c in view.calls:
        verdict = c.action
        if c.action != "allow":
            verdict = f"{c.action} {c.category or ''} ({c.rule_id or c.stage})"
        seen = f"{c.answer.output}\n[exit {c.answer.exit_code}]"
        calls.add_row(
            str(c.seq), c.tool, cell(c.command, limit), cell(verdict), cell(seen, limit),
            cell(c.touched or "", limit),
        )  # fmt: skip
    console().print(calls)


def register(app: typer.Typer) -> None:
    """Add ``rlguard episodes`` to the root app."""
    app.add_typer(episodes_app, name="episodes")
