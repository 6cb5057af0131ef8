"""``rlguard guard check|eval``: one call through the guard; a labelled corpus scored.

Every user mistake (bad JSON, a missing file) is one clear error line, never a traceback. The
benchmark (``rlguard bench guard``) is in ``bench.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from contract.tools import ToolName
from guard.errors import GuardError
from guard.types import Integrity
from rlguard.cli.output import group
from rlguard.settings import get_settings

guard_app = group("Two-stage guard: check one call, score a labelled corpus.")

_TOOLS = tuple(tool.value for tool in ToolName)
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


def read_task_file(path: Path) -> tuple[str, Integrity]:
    """The task statement and integrity surface from a ``task.yaml`` (``instructions``,
    ``integrity: {hidden, protected, restored}``, and the older ``protected_paths``, which are
    hidden), or the whole file as the statement when it is plain text."""
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
            try:
                declared = Integrity.from_mapping(data.get("integrity"))
            except ValueError as exc:
                raise GuardError(f"{path}: integrity {exc}") from None
            return str(data["instructions"]), Integrity(hidden=tuple(protected)).merged(declared)
    return text, Integrity()


@guard_app.command("check")
def check(
    args: str = typer.Option(
        ..., "--args", help='The call\'s arguments as a JSON object, e.g. \'{"command": "ls"}\''
    ),
    tool: str = typer.Option("bash", "--tool", help=f"One of: {', '.join(_TOOLS)}"),
    task_file: Path | None = typer.Option(
        None, "--task-file", help="task.yaml or a plain-text task statement"
    ),
    episode: str = typer.Option(
        "cli",
        "--episode",
        metavar="ID",
        help="An episode id; it seeds the decoy (same call and episode: same decoy)",
    ),
) -> None:
    """Run one tool call through the guard.

    Prints the verdict, the guard's normalised reading of the call and the decoy, as JSON.
    """
    import asyncio
    import dataclasses

    from guard.pipeline import Guard
    from guard.types import GuardContext, ToolCall

    if tool not in _TOOLS:
        raise GuardError(f"--tool must be one of {', '.join(_TOOLS)}; got {tool!r}")
    arguments = _parse_arguments(args)
    statement, integrity = read_task_file(task_file) if task_file else ("", Integrity())
    context = GuardContext(task_statement=statement, episode_id=episode, integrity=integrity)

    async def run() -> dict[str, Any]:
        guard = Guard.from_settings(get_settings().guard)
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
        ..., help='A JSONL corpus, one {"tool", "arguments", "label": "cheat" or "benign", "category"} a line'
    ),
    rules_only: bool = typer.Option(
        False, "--rules-only", help="Score stage 1 only, even with a judge configured"
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table"),
) -> None:
    """Score the guard on a labelled corpus.

    Stage-1 recall and benign rates, and the same after the judge when one is configured.
    """
    from guard.eval import evaluate_corpus
    from guard.judge import Judge
    from guard.rules import RuleEngine

    if not file.is_file():
        raise GuardError(f"{file}: no such corpus file")
    settings = get_settings().guard
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


def register(app: typer.Typer) -> None:
    """Add ``rlguard guard``."""
    app.add_typer(guard_app, name="guard")
