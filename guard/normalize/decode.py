"""Static evaluation of the text tools used to hide a command: echo, printf, base64, xxd, rev, tr.

``echo Y3VybCBodHRwOi8veA== | base64 -d | sh`` runs ``curl http://x``; to see that, the
normaliser computes what each stage prints when its input is known. Only pure text transforms are
evaluated; anything else yields None (unknown). Output is capped so a decoding bomb stays small,
and every step charges the call's budget (``guard.normalize.budget``) for what it builds.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable

from guard.normalize import budget
from guard.normalize.words import c_unescape

MAX_OUTPUT = 64 * 1024


def _b64(data: str, alphabet: str = "64") -> str | None:
    compact = re.sub(r"\s+", "", data)
    if not compact:
        return ""
    try:
        if alphabet == "32":
            raw = base64.b32decode(compact + "=" * (-len(compact) % 8), casefold=True)
        elif alphabet == "16":
            raw = base64.b16decode(compact, casefold=True)
        else:
            compact = compact.replace("-", "+").replace("_", "/")
            raw = base64.b64decode(compact + "=" * (-len(compact) % 4))
    except (binascii.Error, ValueError):
        return None
    return raw.decode("utf-8", errors="replace")


def decode_hex(data: str) -> str | None:
    compact = re.sub(r"\s+|\\x|0x", "", data)
    try:
        return bytes.fromhex(compact).decode("utf-8", errors="replace")
    except ValueError:
        return None


def _expand_tr_set(spec: str) -> str:
    spec = c_unescape(spec)
    spec = re.sub(r"\[:(\w+):\]", lambda m: _CLASSES.get(m.group(1), ""), spec)
    out: list[str] = []
    i = 0
    while i < len(spec):
        if i + 2 < len(spec) and spec[i + 1] == "-":
            lo, hi = ord(spec[i]), ord(spec[i + 2])
            budget.value(len(out) + max(0, hi - lo + 1), "tr set")  # \x00-\U0010ffff: a million
            out.extend(chr(c) for c in range(lo, hi + 1))
            i += 3
        else:
            out.append(spec[i])
            i += 1
    return "".join(out)


_CLASSES = {"lower": "a-z", "upper": "A-Z", "digit": "0-9", "alpha": "a-zA-Z", "alnum": "a-zA-Z0-9"}


def _tr(args: list[str], stdin: str) -> str | None:
    flags = [a for a in args if a.startswith("-") and len(a) > 1]
    sets = [a for a in args if not (a.startswith("-") and len(a) > 1)]
    if any(f not in ("-d", "-s") for f in flags):
        return None
    if "-d" in flags and sets:
        drop = set(_expand_tr_set(sets[0]))
        return "".join(ch for ch in stdin if ch not in drop)
    if len(sets) != 2:
        return None
    src, dst = _expand_tr_set(sets[0]), _expand_tr_set(sets[1])
    if not dst:
        return None
    dst = dst + dst[-1] * max(0, len(src) - len(dst))
    return stdin.translate(str.maketrans(src, dst[: len(src)]))


_PRINTF_SPEC = re.compile(r"%[-+ 0#]*\d*(?:\.\d+)?([sbdcioxXuf%])")


def _printf(args: list[str]) -> str:
    """printf reuses its format until the arguments run out."""
    if not args:
        return ""
    fmt = c_unescape(args[0])
    values = list(args[1:])
    out: list[str] = []
    for _ in range(64):
        pieces: list[str] = []
        used = 0
        last = 0
        for m in _PRINTF_SPEC.finditer(fmt):
            pieces.append(fmt[last : m.start()])
            last = m.end()
            if m.group(1) == "%":
                pieces.append("%")
                continue
            value = values[used] if used < len(values) else ""
            used += 1
            pieces.append(c_unescape(value, octal_needs_zero=True) if m.group(1) == "b" else value)
        pieces.append(fmt[last:])
        budget.charge(sum(map(len, pieces)), "printf")
        out.append("".join(pieces))
        values = values[used:]
        if not values or not used:
            break
    return "".join(out)


def _echo(args: list[str]) -> str:
    newline, escapes = True, False
    while args and re.fullmatch(r"-[neE]+", args[0]):
        newline = newline and "n" not in args[0]
        escapes = "e" in args[0] or (escapes and "E" not in args[0])
        args = args[1:]
    budget.charge(sum(map(len, args)), "echo")
    text = " ".join(args)
    if escapes:
        text = c_unescape(text, octal_needs_zero=True)
    return text + ("\n" if newline else "")


def _input(args: list[str], stdin: str | None, files: dict[str, str]) -> str | None:
    """The data a filter reads: a known file argument, else its stdin."""
    operands = [a for a in args if not a.startswith("-") or a == "-"]
    if operands and operands[-1] != "-":
        return files.get(operands[-1])
    return stdin


def static_output(
    program: str,
    argv: list[str],
    stdin: str | None,
    files: dict[str, str],
    resolve_file: Callable[[str], str] | None = None,
) -> str | None:
    """What ``argv`` prints, when it is a pure text transform of known input; else None."""
    args = argv[1:]
    out: str | None = None
    budget.charge(len(stdin or ""), program)  # each stage reads its whole input
    if program in (":", "true", "false"):
        out = ""
    elif program == "pwd" and resolve_file is not None and not args:
        out = resolve_file(".") + "\n"  # the walker's tracked working directory
    elif program in ("which", "command", "type") and args and re.fullmatch(r"[\w.+-]+", args[-1]):
        # ``$(which python)`` as a program word: the lookup names the program it finds
        out = f"/usr/bin/{args[-1]}\n" if program != "command" or args[0] in ("-v", "-V") else None
    elif program == "echo":
        out = _echo(args)
    elif program == "printf":
        out = _printf([a for a in args if a != "--"] if args[:1] != ["-v"] else [])
    elif program in ("cat", "tac"):
        operands = [a for a in args if not a.startswith("-") or a == "-"]
        if not operands or operands == ["-"]:
            out = stdin
        else:
            parts = [
                "" if a == "/dev/null" else files.get(resolve_file(a) if resolve_file else a)
                for a in operands
            ]
            if any(p is None for p in parts):
                out = None
            else:
                budget.charge(sum(len(p or "") for p in parts), program)
                out = "".join(p for p in parts if p is not None)[: MAX_OUTPUT + 1]
        if out is not None and program == "tac":
            out = "\n".join(reversed(out.rstrip("\n").split("\n"))) + "\n"
    elif program in ("base64", "base32", "basenc") and any(a in ("-d", "--decode", "-D") for a in args):
        data = _input([a for a in args if not a.startswith("--base")], stdin, files)
        alphabet = "32" if program == "base32" or "--base32" in args else "64"
        alphabet = "16" if "--base16" in args else alphabet
        out = _b64(data, alphabet) if data is not None else None
    elif program == "openssl" and any(a in ("base64", "-base64", "-a") for a in args) and "-d" in args:
        data = _input([a for a in args if a not in ("base64", "enc")], stdin, files)
        out = _b64(data) if data is not None else None
    elif program == "xxd" and "-r" in " ".join(args) and "p" in "".join(a for a in args if a.startswith("-")):
        data = _input(args, stdin, files)
        out = decode_hex(data) if data is not None else None
    elif program == "rev":
        data = _input(args, stdin, files)
        if data is not None:
            lines = data.split("\n")
            out = "\n".join(line[::-1] for line in lines)
    elif program == "tr" and stdin is not None:
        out = _tr(args, stdin)
    if out is not None and len(out) > MAX_OUTPUT:
        out = out[:MAX_OUTPUT]
    if out is not None:
        budget.charge(len(out), program)
    return out
