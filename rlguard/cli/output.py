"""What commands print: JSON, tables, benchmark results, errors, progress.

Results go to stdout (a table, or JSON with ``--json``); progress, notes and errors go to stderr, so
``--json`` output can always be piped. Text an agent controlled (commands, outputs, reasons, task
ids from a suite) goes through :func:`cell`: controls become visible escapes and Rich markup is not
interpreted, so nothing an agent wrote can drive the terminal.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator
from typing import Any

import typer
from rich import box
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.text import Text

from sandbox.textsafe import terminal_safe


def group(help: str, **options: Any) -> typer.Typer:
    """A command group: plain help (the docstrings as written, wrapped to the terminal), its own
    help when called without a command."""
    return typer.Typer(help=help, no_args_is_help=True, rich_markup_mode=None, **options)


def console() -> Console:
    """Standard output (made per call: tests swap ``sys.stdout``)."""
    return Console()


def err_console() -> Console:
    """Standard error: progress, notes, errors."""
    return Console(stderr=True)


def print_json(value: Any, *, indent: int | None = 2) -> None:
    """``value`` as JSON on stdout (datetimes and paths as strings)."""
    print(json.dumps(value, indent=indent, default=str), flush=True)


def line(text: str) -> None:
    """A line of results on stdout, printed as it is: no markup, controls shown as escapes."""
    Console(soft_wrap=True).print(Text(terminal_safe(text)), highlight=False)


def print_error(message: str) -> None:
    """``error: message`` on one line of stderr, controls shown as escapes."""
    line = Text.assemble(("error:", "bold red"), " ", terminal_safe(message, one_line=True))
    Console(stderr=True, soft_wrap=True).print(line, highlight=False)


def note(message: str) -> None:
    """A line of information on stderr (stdout stays for results)."""
    Console(stderr=True, soft_wrap=True).print(Text(terminal_safe(message)), highlight=False)


def cell(value: object, limit: int | None = None) -> Text:
    """Stored or agent-controlled text as a table cell: controls visible, no markup, cut to ``limit``."""
    text = "" if value is None else str(value)
    if limit is not None and len(text) > limit:
        text = text[: limit - 1] + "…"
    return Text(terminal_safe(text))


def table(*columns: str, title: str | None = None, caption: str | None = None) -> Table:
    """A plain table that reads at 80 columns: light rules, no outer padding."""
    made = Table(
        title=title,
        caption=caption,
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        show_edge=False,
        title_justify="left",
    )
    for column in columns:
        made.add_column(column, overflow="fold")
    return made


def print_bench(name: str, numbers: dict[str, Any], as_json: bool) -> None:
    """One JSON line (floats to 3 decimals), or a table captioned with the host's load average."""
    if as_json:
        print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in numbers.items()}))
        return
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    shown = Table(title=f"rlguard bench {name}", caption=f"host load average: {load} ({os.cpu_count()} CPUs)")
    shown.add_column("metric")
    shown.add_column("value", justify="right")
    for key, value in numbers.items():
        shown.add_row(key, f"{value:,.3f}" if isinstance(value, float) else str(value))
    console().print(shown)


def bar(description: str = "", *, info: bool = False) -> Progress:
    """A progress bar on stderr that moves within a long item: a spinner, done/total, elapsed time
    (and a free ``info`` field); it disappears when done."""
    columns: list[Any] = [
        SpinnerColumn(),
        TextColumn("{task.description}", style="bold", markup=False),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    ]
    if info:
        columns.append(TextColumn("{task.fields[info]}"))
    return Progress(*columns, console=err_console(), transient=True)


@contextlib.contextmanager
def spinner(description: str) -> Iterator[Callable[[str], None]]:
    """A spinner with elapsed time on stderr for one long phase; yields a function that names the
    current phase (the text shown after the spinner)."""
    progress = Progress(
        SpinnerColumn(), TextColumn("{task.description}", markup=False), TimeElapsedColumn(),
        console=err_console(), transient=True,
    )  # fmt: skip
    task = progress.add_task(terminal_safe(description, one_line=True), total=None)

    def phase(text: str) -> None:
        shown = terminal_safe(text.removeprefix("rlguard: "), one_line=True)
        progress.update(task, description=shown[:200])
        if not progress.console.is_terminal:  # a log, not a screen: keep each phase as a line
            note(f"rlguard: {shown}")

    with progress:
        yield phase
