"""Reading a command's arguments for its effects (``guard.normalize.effects``): operands past
the options, an option's value, bundled short flags, and paths made absolute (``/dev/null``,
``-`` and remote ``host:path`` or URL operands are no paths of this machine).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Iterable

from guard.paths import absolute
from guard.types import Effect

# one program family's effects: (argv with the bare program name first, working directory)
Handler = Callable[[list[str], str], list[Effect]]


def split_names(text: str) -> list[str]:
    """A table's words (program or function names), written as one string to keep tables short."""
    return text.split()


OUTPUT_OPTS = frozenset({"-o", "--output", "--out", "--outfile", "--output-file", "--output-document"})
_NULL = frozenset({"/dev/null", "/dev/stdin", "/dev/stdout", "/dev/stderr", "/dev/tty", "-"})
_REMOTE = re.compile(r"^[\w.@-]+:(?!//)|^[a-z][a-z0-9+.-]*://", re.I)
IN_PLACE_LONG = ("--in-place", "--inplace", "--write", "--fix", "--overwrite")


def operands_of(args: Iterable[str], value_opts: frozenset[str] = frozenset()) -> list[str]:
    """Non-option arguments; options in ``value_opts`` take the next argument as their value;
    everything after ``--`` is an operand."""
    out: list[str] = []
    skip = False
    ended = False
    for arg in args:
        if skip:
            skip = False
            continue
        if ended or arg == "-" or not arg.startswith("-"):
            out.append(arg)
        elif arg == "--":
            ended = True
        elif arg in value_opts:
            skip = True
    return out


def option_value(args: list[str], names: Iterable[str]) -> str | None:
    """The value of the first of ``names`` (``-o X``, ``-oX`` for one-letter names, ``--out=X``)."""
    names = tuple(names)
    for i, arg in enumerate(args):
        for name in names:
            if arg == name and i + 1 < len(args):
                return args[i + 1]
            if name.startswith("--") and arg.startswith(name + "="):
                return arg[len(name) + 1 :]
            if len(name) == 2 and not name.startswith("--") and arg.startswith(name) and len(arg) > 2:
                return arg[2:]
    return None


def has_flag(args: list[str], short: str = "", long: Iterable[str] = ()) -> bool:
    """Whether a short flag letter appears in any bundle (``-rf``) or a long flag is given."""
    long = tuple(long)
    for arg in args:
        if arg == "--":
            return False
        if arg.startswith("--"):
            if arg in long or arg.split("=", 1)[0] in long:
                return True
        elif arg.startswith("-") and len(arg) > 1 and any(c in arg[1:] for c in short):
            return True
    return False


def effect_path(value: str, cwd: str) -> str | None:
    """``value`` as an absolute path, or None when it names no local file."""
    if (
        not value
        or value in _NULL
        or ("\n" in value or len(value) > 4096)
        or (":" in value and _REMOTE.match(value))
    ):
        return None
    return absolute(value, cwd)


def effects_on(op: str, values: Iterable[str], cwd: str, recursive: bool = False) -> list[Effect]:
    """One ``op`` effect per value that is a local path."""
    return [Effect(op, p, recursive) for v in values if (p := effect_path(v, cwd)) is not None]


def landing_paths(target: str, source: str, cwd: str) -> list[str]:
    """Where a copy or move of ``source`` to ``target`` may land: ``target`` itself (a file, or a
    directory replaced) and ``target/basename(source)`` (into an existing directory)."""
    full = absolute(target, cwd)
    name = posixpath.basename(source.rstrip("/"))
    return [full, f"{full.rstrip('/')}/{name}"] if name and name not in (".", "..") else [full]
