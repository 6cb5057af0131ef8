"""The ``rlguard`` command line: one program, each package registers its own sub-commands.

Each package's ``cli.register(app, bench)`` adds its commands; heavy imports (docker, torch) happen
inside the commands, so ``rlguard --version`` stays fast.
"""

import sys

import typer
from rich.console import Console

from rlguard import __version__
from rlguard.errors import RlguardError

app = typer.Typer(
    name="rlguard",
    help="Agent sandbox and reward-guard gateway for RL training of LLM agents.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
bench_app = typer.Typer(help="Benchmarks; each prints a table, or JSON with --json.", no_args_is_help=True)
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
    from rlguard import demo
    from rlguard.gateway import cli as gateway_cli
    from rollout import cli as rollout_cli
    from sandbox import cli as sandbox_cli
    from trainer import cli as trainer_cli

    for module in (sandbox_cli, guard_cli, gateway_cli, rollout_cli, trainer_cli, demo):
        module.register(app, bench_app)


_register_all()


def main() -> None:
    """Console entry point: known errors become one clear line on stderr and exit code 2."""
    try:
        app()
    except RlguardError as exc:
        Console(stderr=True, soft_wrap=True).print(f"[bold red]error:[/] {exc}", highlight=False)
        sys.exit(2)
