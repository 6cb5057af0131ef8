"""The ``rlguard`` command line: the root app, where every command group is registered, and how a
failure is printed.

Each module of ``rlguard.cli`` holds one command group and registers it here (a new group, such
as ``rlguard episodes list|show`` in ``episodes.py``, is one more module and one more name in
``_register_all``); every benchmark is in ``bench.py``; ``output.py`` prints, ``resources.py``
opens (suites by name, the store, the engine), ``serving.py`` starts servers.

Commands read the one ``Settings`` object (``rlguard.settings.get_settings()``, built once) and
hand its sections down; nothing below reads the environment. Heavy imports (docker, torch,
SQLAlchemy) happen inside the commands, so ``--help`` and ``--version`` stay fast.

A failure is one line on stderr and a non-zero exit status, never a traceback: ``error: ...`` and
2 for a known error (every layer's error base) or a usage mistake, ``interrupted`` and 130 for
Ctrl-C.
"""

from __future__ import annotations

import sys
from typing import Any

import typer
from typer.core import TyperGroup
from typer.exceptions import TyperException

from rlguard import __version__
from rlguard.cli.output import print_error
from rlguard.errors import USER_ERRORS


class RootGroup(TyperGroup):
    """The root command: known errors, usage mistakes and Ctrl-C become one line and an exit status."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _name_values(self)

    def invoke(self, ctx: typer.Context) -> Any:
        try:
            return super().invoke(ctx)
        except USER_ERRORS as exc:
            print_error(str(exc))
            raise typer.Exit(2) from None
        except KeyboardInterrupt:
            print_error("interrupted")
            raise typer.Exit(130) from None

    def main(  # type: ignore[override]
        self,
        args: Any = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except TyperException as exc:
            if type(exc).__name__ == "NoArgsIsHelpError":
                exc.show()  # type: ignore[attr-defined]  # a group called alone shows its help
                code = 2
            else:
                print_error(_usage_error(exc))
                code = exc.exit_code
        except typer.Abort:
            print_error("interrupted")
            code = 130
        code = code if isinstance(code, int) else 0
        if not standalone_mode:
            return code
        sys.exit(code)


def _name_values(command: Any) -> None:
    """Name each option's value after the option (``--suite SUITE``, ``--policy-url URL``), or its
    kind (``PATH``, a count ``N``, ``SECONDS``), instead of its Python type, in every command under
    ``command``; an option's own ``metavar`` stays."""
    for param in getattr(command, "params", []):
        if param.param_type_name != "option" or param.metavar is not None or getattr(param, "is_flag", False):
            continue
        if param.name == "version" or not param.opts:
            continue
        long_name = max(param.opts, key=len).lstrip("-")
        annotation = str(getattr(getattr(param, "type_descriptor", None), "annotation", ""))
        last = long_name.rsplit("-", 1)[-1]
        if "Path" in annotation:
            param.metavar = "PATH"
        elif "int" in annotation and last != "port":
            param.metavar = "N"
        elif "float" in annotation and (last in ("s", "timeout")):
            param.metavar = "SECONDS"
        else:
            param.metavar = last.upper()
    for sub in getattr(command, "commands", {}).values():
        _name_values(sub)


def _usage_error(exc: TyperException) -> str:
    ctx = getattr(exc, "ctx", None)
    message = " ".join(exc.format_message().split())
    if ctx is None:
        return message
    return f"{ctx.command_path}: {message} (see {ctx.command_path} --help)"


app = typer.Typer(
    name="rlguard",
    cls=RootGroup,
    no_args_is_help=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    add_completion=False,
)


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
    """Agent sandbox and reward-guard gateway for RL training of LLM agents.

    Settings come from RLGUARD_* environment variables (RLGUARD_DATABASE_URL, RLGUARD_ADMIN_TOKEN,
    RLGUARD_GATEWAY__PORT, ...); the state (the SQLite database, the admin token, built suites)
    lives in RLGUARD_STATE_DIR, ./.rlguard by default.
    """


def _register_all() -> None:
    from rlguard.cli import (
        audit,
        bench,
        demo,
        episodes,
        grade,
        guard,
        loop,
        mcp,
        policy,
        rollout,
        sandbox,
        serve,
        tasks,
        train,
    )

    # In the order --help lists them: the service, the data, tasks, the work, then tools.
    for module in (
        serve,
        audit,
        episodes,
        tasks,
        grade,
        rollout,
        policy,
        train,
        loop,
        demo,
        guard,
        sandbox,
        mcp,
        bench,
    ):
        module.register(app)


_register_all()


def main() -> None:
    """Console entry point (``rlguard``, ``python -m rlguard``)."""
    app()
