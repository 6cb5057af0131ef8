"""Small helpers shared by the per-program decoys: arguments, hosts, seeded randomness, bash errors."""

from __future__ import annotations

import hashlib
import posixpath
import random
import re
import shutil
import subprocess
from collections.abc import Iterable
from urllib.parse import urlsplit

from guard.types import Command, ToolAnswer

_URL = re.compile(r"\b([a-zA-Z][a-zA-Z0-9+.-]*)://([^\s'\"`<>()\[\]{};,]+)")
_IPV4 = re.compile(r"^\d{1,3}(?:\.\d{1,3}){3}$")
_BARE_HOST = re.compile(r"^(?:[\w-]+@)?([a-zA-Z0-9-]+(?:\.[a-zA-Z0-9-]+)+)(?::\d+)?(?:[/:].*)?$")


# The sandbox image runs with LANG=C.UTF-8: programs that quote with the locale's quotation marks
# (findutils, wget) print ‘curly’ quotes there; coreutils file names keep 'ASCII' quotes.
UTF8_LOCALE = True


def lquote(text: str) -> str:
    """Quote ``text`` as gnulib's locale quoting style does in the sandbox's locale."""
    return f"\u2018{text}\u2019" if UTF8_LOCALE else f"'{text}'"


# gnulib's shell-escape quoting (coreutils' ``quotef``): a name is printed as it is unless a shell
# would read one of these specially; ``#`` and ``~`` only lead, ``{``/``}`` only alone.
_SHELL_SPECIAL = frozenset(' !"$&()*;<=>?[\\^`|\'')
_C_ESCAPES = {"\a": "a", "\b": "b", "\f": "f", "\n": "n", "\r": "r", "\t": "t", "\v": "v"}


def gnu_quote(name: str, *, always: bool = False) -> str:
    """``name`` as GNU coreutils print a file name in an error: ``quotef`` (``cat: 'a b': No such
    file ...``, plain names unquoted) or, with ``always``, ``quoteaf`` (``ls: cannot access 'a'``)."""
    controls = any(ord(c) < 32 or ord(c) == 127 for c in name)
    special = (
        controls
        or any(c in _SHELL_SPECIAL for c in name)
        or name[:1] in ("#", "~")
        or name in ("{", "}")
    )
    if not name:
        return "''"
    if not special:
        return f"'{name}'" if always else name
    if "'" in name and not controls and not any(c in name for c in '"$`\\!'):
        return f'"{name}"'
    parts: list[str] = []
    for char in name:
        if ord(char) < 32 or ord(char) == 127:
            parts.append(f"'$'\\{_C_ESCAPES.get(char, f'{ord(char):03o}')}''")
        elif char == "'":
            parts.append("'\\''")
        else:
            parts.append(char)
    return f"'{''.join(parts)}'".removesuffix("''")  # as gnulib: a trailing empty quote is dropped


def args_of(command: Command) -> list[str]:
    """The arguments after the program word (``argv`` may or may not repeat the program)."""
    argv = list(command.argv)
    if argv and posixpath.basename(argv[0]) == command.program:
        return argv[1:]
    return argv


def seeded_rng(episode_id: str, normalized_text: str) -> random.Random:
    """Randomness that repeats for the same call in the same episode, so retries see the same answer."""
    digest = hashlib.sha256(f"{episode_id}\0{normalized_text}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def first_url(texts: Iterable[str]) -> str | None:
    """The first ``scheme://...`` URL in any of ``texts``."""
    for text in texts:
        found = _URL.search(text)
        if found:
            return found.group(0)
    return None


_DOMAIN = re.compile(
    r"(?<![\w.-])((?:[a-z0-9](?:[a-z0-9-]*[a-z0-9])?\.)+"
    r"(?:com|org|net|io|dev|ai|co|app|edu|gov|info|xyz|me|sh|cloud|site|[a-z]{2}))(?![\w-])",
    re.IGNORECASE,
)


def first_domain(text: str) -> str | None:
    """The first thing in ``text`` that looks like a host name (``devhub.io`` in ``TCP:devhub.io:443``)."""
    for found in _DOMAIN.finditer(text):
        name = found.group(1)
        if not name.lower().endswith((".py", ".sh", ".txt", ".json", ".js", ".rb", ".pl", ".md")):
            return name
    return None


def host_of(url: str) -> str:
    """``https://user@github.com:443/x`` -> ``github.com``; ``example.com/x`` -> ``example.com``."""
    if "://" not in url:
        url = "//" + url
    return urlsplit(url).hostname or url


def port_of(url: str, default: int = 80) -> int:
    """The URL's port, or the scheme's default."""
    parts = urlsplit(url if "://" in url else "//" + url)
    try:
        if parts.port:
            return parts.port
    except ValueError:
        pass
    return 443 if parts.scheme == "https" else default


def bare_host(arg: str) -> str | None:
    """A host written without a scheme (``example.com``, ``git@github.com:x``, ``user@h``), or None."""
    found = _BARE_HOST.match(arg)
    return found.group(1) if found else None


def is_ip(host: str) -> bool:
    """Dotted IPv4 (name resolution does not apply to it: the connect fails instead)."""
    return bool(_IPV4.match(host))


def positionals(args: list[str], value_opts: frozenset[str] = frozenset()) -> list[str]:
    """Arguments that are not options (and not values of ``value_opts``); ``--`` ends options."""
    out: list[str] = []
    skip = False
    for i, arg in enumerate(args):
        if skip:
            skip = False
            continue
        if arg == "--":
            out.extend(args[i + 1 :])
            break
        if arg in value_opts:
            skip = True
            continue
        if arg.startswith("-") and arg != "-":
            continue
        out.append(arg)
    return out


def has_flag(args: list[str], short: str, *long: str) -> bool:
    """Whether a short flag (alone or in a cluster like ``-sSL``) or any long form is present."""
    for arg in args:
        if arg in long:
            return True
        if short and arg.startswith("-") and not arg.startswith("--") and short in arg[1:]:
            return True
    return False


# The sandbox runs each line as ``/bin/bash -c LINE``: bash prefixes its messages with argv[0].
SHELL = "/bin/bash"
SHELL_LINE_1 = f"{SHELL}: line 1: "


def command_not_found(program: str) -> ToolAnswer:
    """What ``/bin/bash -c`` says for a program that is not installed."""
    return ToolAnswer(output=f"{SHELL_LINE_1}{program}: command not found", exit_code=127)


_BASH = shutil.which("bash")
_MAX_SYNTAX_CHECK_CHARS = 100_000


def bash_syntax_error(script: str) -> ToolAnswer | None:
    """What ``bash -c script`` says when the script does not parse, or None when it parses.

    ``bash -n`` only reads the script and executes nothing, so bash's own message (exit code 2)
    can be had without running the agent's command.
    """
    if _BASH is None or len(script) > _MAX_SYNTAX_CHECK_CHARS:
        return None
    try:
        done = subprocess.run(
            [SHELL, "-n", "-c", script],  # argv[0] as in the sandbox: it prefixes every message
            executable=_BASH,
            capture_output=True,
            timeout=2,
            env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode == 0:
        return None
    return ToolAnswer(done.stderr.decode("utf-8", "replace"), 2)
