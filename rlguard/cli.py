"""The ``rlguard`` command line: one program, each package registers its own sub-commands.

Each package's ``cli.register(app, bench)`` adds its commands; heavy imports (docker, torch) happen
inside the commands, so ``rlguard --version`` stays fast. A benchmark returns its numbers as a flat
dict and ``rlguard bench`` prints them, one JSON line with ``--json`` or a table with the load
average it ran under; benchmarks whose results nest print themselves and return None.
"""

import functools
import json
import os
import sys
from collections.abc import Callable
from typing import Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from rlguard import __version__
from rlguard.errors import USER_ERRORS
from sandbox.textsafe import terminal_safe

app = typer.Typer(
    name="rlguard",
    help="Agent sandbox and reward-guard gateway for RL training of LLM agents.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def print_bench(name: str, numbers: dict[str, Any], as_json: bool) -> None:
    """One JSON line (floats to 3 decimals), or a table captioned with the host's load average."""
    if as_json:
        print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in numbers.items()}))
        return
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    table = Table(title=f"rlguard bench {name}", caption=f"host load average: {load} ({os.cpu_count()} CPUs)")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in numbers.items():
        table.add_row(key, f"{value:,.3f}" if isinstance(value, float) else str(value))
    Console().print(table)


class BenchGroup(typer.Typer):
    """``rlguard bench``: a command registered here has what it returns printed by :func:`print_bench`."""

    def command(self, name: str, **options: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:  # type: ignore[override]
        register = super().command(name, **options)

        def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
            @functools.wraps(fn)
            def run(*args: Any, **kwargs: Any) -> None:
                numbers = fn(*args, **kwargs)
                if numbers is not None:
                    print_bench(name, numbers, bool(kwargs.get("as_json")))

            register(run)
            return fn

        return decorate


bench_app = BenchGroup(help="Benchmarks; each prints a table, or JSON with --json.", no_args_is_help=True)
app.add_typer(bench_app, name="bench")


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"rlguard {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version_callback, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """rlguard: sandboxes, guard, gateway, rollout and trainer."""


def _register_all() -> None:
    from guard import cli as guard_cli
    from rlguard import demo, grade_cli, run_commands
    from rlguard.gateway import cli as gateway_cli
    from rlguard.integrations import cli as integrations_cli
    from sandbox import cli as sandbox_cli
    from tasks import cli as tasks_cli
    from trainer import cli as trainer_cli

    for module in (
        sandbox_cli,
        guard_cli,
        gateway_cli,
        tasks_cli,
        run_commands,
        trainer_cli,
        demo,
        grade_cli,
        integrations_cli,
    ):
        module.register(app, bench_app)


_register_all()


def main() -> None:
    """Console entry point: known errors become one clear line on stderr and exit code 2."""
    try:
        app()
    except USER_ERRORS as exc:
        line = Text.assemble(("error:", "bold red"), " ", terminal_safe(str(exc)))
        Console(stderr=True, soft_wrap=True).print(line, highlight=False)
        sys.exit(2)
