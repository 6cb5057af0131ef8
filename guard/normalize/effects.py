"""What a command does to paths: reads and changes, path by path, whatever the spelling.

The integrity surface of a task (``guard.integrity``) is about paths, not programs: a harness
script may not be changed whether it is overwritten by a redirect, ``cp``, ``mv``, ``sed -i``,
``truncate``, ``chmod``, ``ln -sf`` or ``install``; a hidden file may not be read whether by
``cat``, ``grep``, ``tar``, ``cp`` or a script's argument. This module turns one simple command
(its program name and argument vector, after normalisation has unwrapped it) into ``Effect``\\ s:
``read``/``list``/``exec`` and ``write``/``append``/``delete``/``move``/``mode``/``link``.

One handler per program family, registered by name (``HANDLERS``: the tables of
``effects_contents`` and ``effects_placement``, argument reading in ``effects_args``); a program
without one reads every operand (a hidden path given to any tool counts as read) and changes only
what its output options name (``-o FILE``, ``--output=FILE``). Paths are made absolute against the command's
working directory; globs are kept (``rm -rf *`` deletes whatever ``*`` expands to: the matcher
decides what it could reach). Directory operations are ``recursive`` (``rm -r``, ``cp -r``,
``grep -r``, ``chmod -R``); a move always is (moving a directory moves its contents).
"""

from __future__ import annotations

from guard.normalize.effects_args import (
    IN_PLACE_LONG,
    OUTPUT_OPTS,
    Handler,
    effect_path,
    effects_on,
    operands_of,
    option_value,
    split_names,
)
from guard.normalize.effects_contents import CONTENT_HANDLERS
from guard.normalize.effects_placement import PLACEMENT_HANDLERS
from guard.normalize.programs import is_python
from guard.paths import absolute
from guard.types import Effect

_INTERPRETER_VALUES = frozenset({"-c", "-m", "-W", "-X", "-o", "-O", "--rcfile", "--init-file"})


def _generic(argv: list[str], cwd: str) -> list[Effect]:
    """Unknown programs: every operand (and ``--opt=value`` value) may be read; output options
    (``-o FILE``, ``--output=FILE``) are written; with an in-place flag (``--in-place``,
    ``--write``, ``--fix``) the operands are written."""
    args = argv[1:]
    if any(a in IN_PLACE_LONG or a.startswith("--in-place=") for a in args):
        return effects_on("write", operands_of(args, OUTPUT_OPTS), cwd)
    out: list[Effect] = []
    written = option_value(args, OUTPUT_OPTS)
    if written is not None and (p := effect_path(written, cwd)) is not None:
        out.append(Effect("write", p))
    values = [a.split("=", 1)[1] for a in args if a.startswith("--") and "=" in a]
    operands = [a for a in operands_of(args, OUTPUT_OPTS) if a != written]
    out.extend(effects_on("read", [*operands, *values], cwd))
    return out


def _exec_first(argv: list[str], cwd: str) -> list[Effect]:
    """An interpreter or shell given a script: the script runs (``exec``), its arguments may be read."""
    operands = operands_of(argv[1:], _INTERPRETER_VALUES)
    if any(a in ("-c", "-m") for a in argv[1:]):
        return effects_on("read", operands, cwd)
    return [*effects_on("exec", operands[:1], cwd), *effects_on("read", operands[1:], cwd)]


HANDLERS: dict[str, Handler] = {
    **CONTENT_HANDLERS,
    **PLACEMENT_HANDLERS,
    **dict.fromkeys(
        ["bash", "sh", "dash", "zsh", "ksh", "node", "nodejs", "deno", "bun", "php", "lua", "Rscript"],
        _exec_first,
    ),
    # commands with no file operands worth reading (their arguments are words, not paths)
    **dict.fromkeys(
        split_names(
            "echo printf true false exit return export declare local set unset shift cd pushd popd "
            "alias type which command hash sleep kill pkill pgrep ps date seq expr let read wait jobs "
            "make pip pip3 npm npx yarn pnpm cargo go uv poetry pre-commit git-lfs tr yes nproc uname "
            "whoami id hostname printenv ulimit umask trap eval"
        ),
        lambda argv, cwd: [],
    ),
}


def command_effects(argv: list[str], cwd: str, word: str = "") -> list[Effect]:
    """The effects of one simple command run in ``cwd``: ``argv[0]`` is the bare program name,
    ``word`` the program as written (``./shutdown.sh`` runs that file)."""
    if not argv:
        return []
    handler = HANDLERS.get(argv[0]) or (_exec_first if is_python(argv[0]) else _generic)
    out = handler(argv, cwd)
    if "/" in word:
        out.insert(0, Effect("exec", absolute(word, cwd)))
    return out
