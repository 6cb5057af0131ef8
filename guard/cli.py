"""``rlguard guard check|eval`` and ``rlguard bench guard``.

Heavy imports (rules, judge, the OpenAI SDK) happen inside the commands so ``rlguard --help`` stays
fast. Every user mistake (bad JSON, a missing file) is one clear error line, never a traceback.

Imports inside the commands keep ``rlguard --version`` and ``--help`` fast: docker, torch,
SQLAlchemy and the packages behind them load only for the command that runs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from guard.errors import GuardError
from guard.settings import GuardSettings

guard_app = typer.Typer(
    help="Two-stage guard: check one call, score a labelled corpus.", no_args_is_help=True
)

_TOOLS = ("bash", "read_file", "write_file", "edit_file", "list_dir", "submit")
_MAX_TASK_FILE_BYTES = 1 << 20


def _parse_arguments(raw: str) -> dict[str, Any]:
    try:
        arguments = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise GuardError(f"--args is not JSON: {exc.msg} (column {exc.colno})") from exc
    if not isinstance(arguments, dict):
        raise GuardError(
            f'--args must be a JSON object such as \'{{"command": "ls"}}\', not {type(arguments).__name__}'
        )
    return arguments


def read_task_file(path: Path) -> tuple[str, tuple[str, ...]]:
    """The task statement and protected paths from a ``task.yaml`` (``instructions``,
    ``protected_paths``), or the whole file as the statement when it is plain text."""
    import yaml

    try:
        if path.stat().st_size > _MAX_TASK_FILE_BYTES:
            raise GuardError(f"{path}: task file larger than {_MAX_TASK_FILE_BYTES} bytes")
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise GuardError(f"{path}: cannot read task file: {exc}") from exc
    if path.suffix in (".yaml", ".yml"):
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise GuardError(f"{path}: not valid YAML: {exc}") from exc
        if isinstance(data, dict) and "instructions" in data:
            protected = data.get("protected_paths") or []
            if not isinstance(protected, list) or not all(isinstance(p, str) for p in protected):
                raise GuardError(f"{path}: protected_paths must be a list of strings")
            return str(data["instructions"]), tuple(protected)
    return text, ()


def _guard_settings() -> GuardSettings:
    from guard.settings import GuardEnv

    return GuardEnv().guard


@guard_app.command("check")
def check(
    args: str = typer.Option(
        ..., "--args", help='The call\'s arguments as a JSON object, e.g. \'{"command": "ls"}\''
    ),
    tool: str = typer.Option("bash", "--tool", help=f"One of: {', '.join(_TOOLS)}"),
    task_file: Path | None = typer.Option(
        None, "--task-file", help="task.yaml or a plain-text task statement"
    ),
    episode_id: str = typer.Option(
        "cli", "--episode-id", help="Seeds the decoy (same call + episode: same decoy)"
    ),
) -> None:
    """Run one tool call through the guard; print its verdict and decoy as JSON."""
    import asyncio
    import dataclasses

    from guard.pipeline import Guard
    from guard.types import GuardContext, ToolCall

    if tool not in _TOOLS:
        raise GuardError(f"--tool must be one of {', '.join(_TOOLS)}; got {tool!r}")
    arguments = _parse_arguments(args)
    statement, protected = read_task_file(task_file) if task_file else ("", ())
    context = GuardContext(task_statement=statement, episode_id=episode_id, protected_paths=protected)

    async def run() -> dict[str, Any]:
        guard = Guard.from_settings(_guard_settings())
        try:
            decision = await guard.check(ToolCall(tool, arguments), context)
        finally:
            await guard.aclose()
        return {
            "verdict": dataclasses.asdict(decision.verdict),
            "normalized": decision.normalized,
            "decoy": dataclasses.asdict(decision.decoy) if decision.decoy else None,
        }

    typer.echo(json.dumps(asyncio.run(run()), indent=2, ensure_ascii=False))


@guard_app.command("eval")
def evaluate(
    file: Path = typer.Argument(
        ..., help='JSONL: {"tool", "arguments", "label": "cheat"|"benign", "category"}'
    ),
    rules_only: bool = typer.Option(
        False, "--rules-only", help="Score stage 1 only, even with a judge configured"
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table"),
) -> None:
    """Score a labelled corpus: stage-1 recall and benign rates (and after the judge, when configured)."""
    from guard.eval import evaluate_corpus
    from guard.judge import Judge
    from guard.rules import RuleEngine

    if not file.is_file():
        raise GuardError(f"{file}: no such corpus file")
    settings = _guard_settings()
    engine = RuleEngine.from_settings(settings)
    judge = Judge(settings.judge) if settings.judge.base_url and not rules_only else None
    report = evaluate_corpus(file, engine, judge=judge)
    if as_json:
        typer.echo(json.dumps(report, indent=2))
        return
    _print_eval_table(file, report)


def _print_eval_table(file: Path, report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    summary = Table(title=f"guard eval: {file.name} ({report['n']} calls)")
    summary.add_column("metric")
    summary.add_column("value", justify="right")
    rows = [(k, v) for k, v in report.items() if k not in ("n", "per_category")]
    rows += [(f"judge {k}", v) for k, v in (report.get("judge") or {}).items()]  # the judge's cost
    for key, value in rows:
        if isinstance(value, int | float):
            summary.add_row(key, str(value) if isinstance(value, int) else f"{value:.3f}")
    per_category = Table(title="recall per category")
    per_category.add_column("category")
    per_category.add_column("recall", justify="right")
    for category, recall in sorted(report.get("per_category", {}).items()):
        per_category.add_row(category, f"{recall:.3f}" if isinstance(recall, int | float) else str(recall))
    console = Console()
    console.print(summary)
    console.print(per_category)


def bench_guard(
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table"),
    corpus: Path | None = typer.Option(None, "--corpus", help="JSONL corpus (default: the shipped one)"),
    rounds: int = typer.Option(5, "--rounds", min=1, max=1000, help="Passes over the corpus"),
) -> dict[str, Any]:
    """Stage-1 throughput on one core and latency p50/p99 over the corpus."""
    from guard.bench import run_guard_bench

    return run_guard_bench(corpus, rounds=rounds)


def register(app: typer.Typer, bench: typer.Typer) -> None:
    """Add ``rlguard guard ...`` and ``rlguard bench guard``."""
    app.add_typer(guard_app, name="guard")
    bench.command("guard")(bench_guard)
