"""Effects of the programs that read files or change them where they lie: text readers and
listers, grep, stream editors (``sed``, ``awk``, ``perl -i``), ``chmod`` and kin, ``touch``,
``truncate``, ``dd``, ``tee``, ``sort -o``, in-place formatters (``black``, ``yq -i``),
editors, ``patch`` and downloads. Their table is ``CONTENT_HANDLERS``; ``guard.normalize.effects``
dispatches on it.
"""

from __future__ import annotations

import re

from guard.normalize.effects_args import (
    IN_PLACE_LONG,
    Handler,
    effects_on,
    has_flag,
    operands_of,
    option_value,
    split_names,
)
from guard.types import Effect

# options that take a value, per handler (built once, not per command)
_TOUCH_VALUES = frozenset({"-r", "-d", "-t", "--reference", "--date"})
_TRUNCATE_VALUES = frozenset({"-s", "-r", "--size", "--reference"})
_MKDIR_VALUES = frozenset({"-m", "--mode"})
_TEE_VALUES = frozenset({"--output-error"})
_UNIQ_VALUES = frozenset({"-f", "-s", "-w", "--skip-fields", "--skip-chars", "--check-chars"})
_EDITOR_VALUES = frozenset({"-c", "-S", "--cmd", "-u", "-i"})
_PATCH_VALUES = frozenset({"-p", "-i", "-d", "-o", "-r", "-B", "-D", "-F", "--input", "--directory"})


def _reader(
    value_opts: str = "", recursive_flags: str = "", recursive_long: str = "", op: str = "read"
) -> Handler:
    opts = frozenset(value_opts.split())
    long = tuple(recursive_long.split())

    def handle(argv: list[str], cwd: str) -> list[Effect]:
        args = argv[1:]
        recursive = bool(recursive_flags or long) and has_flag(args, recursive_flags, long)
        return effects_on(op, operands_of(args, opts), cwd, recursive)

    return handle


def _grep(argv: list[str], cwd: str) -> list[Effect]:
    """grep/rg/ag/ack: the first operand is the pattern unless ``-e``/``-f`` give it; ``-f FILE``
    reads FILE; rg/ag/ack and ``grep -r`` search directories (the working directory by default)."""
    args = argv[1:]
    opts = frozenset(
        split_names(
            "-e -f -m -A -B -C -d -D --regexp --file --max-count --context --after-context --before- "
            "context -g --glob -t --type -T --type-not --include --exclude --exclude-dir --color "
            "--colour -j --threads -M --max-columns --max-depth --ignore-file"
        )
    )
    operands = operands_of(args, opts)
    explicit = any(
        a in ("-e", "-f", "--regexp", "--file") or a.startswith(("--regexp=", "--file=")) for a in args
    )
    if not explicit and operands:
        operands = operands[1:]
    recursive = argv[0] in ("rg", "ag", "ack", "ripgrep") or has_flag(
        args, "rR", ("--recursive", "--dereference-recursive")
    )
    out = effects_on("read", operands or ([cwd] if recursive else []), cwd, recursive)
    pattern_file = option_value(args, ("-f", "--file"))
    if pattern_file is not None:
        out.extend(effects_on("read", [pattern_file], cwd))
    return out


def _sed(argv: list[str], cwd: str) -> list[Effect]:
    args = argv[1:]
    opts = frozenset(["-e", "-f", "-l", "--expression", "--file", "--line-length"])
    operands = operands_of(args, opts)
    if not any(
        a in ("-e", "-f", "--expression", "--file") or a.startswith(("--expression=", "--file="))
        for a in args
    ):
        operands = operands[1:]
    in_place = any(a.startswith("--in-place") or re.match(r"^-[a-zA-Z]*i", a) for a in args)
    out = effects_on("write" if in_place else "read", operands, cwd)
    script = option_value(args, ("-f", "--file"))
    if script is not None:
        out.extend(effects_on("read", [script], cwd))
    return out


def _awk(argv: list[str], cwd: str) -> list[Effect]:
    args = argv[1:]
    opts = frozenset(["-f", "-v", "-F", "--file", "--assign", "--field-separator", "-i", "--include"])
    operands = operands_of(args, opts)
    if option_value(args, ("-f", "--file")) is None and operands:
        operands = operands[1:]
    in_place = any(
        a in ("-i", "--include") and args[i + 1 : i + 2] == ["inplace"] for i, a in enumerate(args)
    )
    operands = [o for o in operands if "=" not in o or "/" in o.split("=", 1)[0]]  # var=value operands
    return effects_on("write" if in_place else "read", operands, cwd)


def _perl_ruby(argv: list[str], cwd: str) -> list[Effect]:
    """``perl -pi -e CODE FILES`` edits FILES; ``perl SCRIPT ARGS`` runs SCRIPT on ARGS."""
    args = argv[1:]
    in_place = any(re.match(r"^-[a-zA-Z0-9]*i", a) for a in args)
    inline = any(re.fullmatch(r"-[a-zA-Z0-9]*[eE]", a) for a in args)
    operands: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif re.fullmatch(r"-[a-zA-Z0-9]*[eE]", arg) or arg in ("-I", "-M", "-r"):
            skip = True
        elif not arg.startswith("-") or arg == "-":
            operands.append(arg)
    if not inline and operands:
        return [
            *effects_on("exec", operands[:1], cwd),
            *effects_on("write" if in_place else "read", operands[1:], cwd),
        ]
    return effects_on("write" if in_place else "read", operands, cwd)


_MODE_WORD = re.compile(r"^[-+=]?[rwxXstugoa,+=0-7-]+$")


def _mode(first_is_mode: bool = True) -> Handler:
    """chmod/chown/chgrp/chattr MODE FILES (``-x`` is a mode to chmod, not an option);
    setfacl takes its ACL as an option's value."""

    def handle(argv: list[str], cwd: str) -> list[Effect]:
        args = argv[1:]
        recursive = False
        operands: list[str] = []
        need_mode = first_is_mode and not any(a.startswith("--reference") for a in args)
        adds_only = False  # chmod +x: permissions only added, nothing the file did is taken away
        skip = False
        for arg in args:
            if skip:
                skip = False
                continue
            if arg in ("-R", "--recursive") or (re.fullmatch(r"-[cfvhHLP]*R[cfvhHLP]*", arg)):
                recursive = True
            elif arg in ("-m", "-x", "-M", "-X", "--modify", "--remove", "--set") and argv[0] == "setfacl":
                skip = True
            elif need_mode and (not arg.startswith("-") or _MODE_WORD.match(arg)) and not operands:
                need_mode = False  # this word is the mode (or owner, or attributes)
                adds_only = argv[0] == "chmod" and bool(re.fullmatch(r"(?:[ugoa]*\+[rwxX]+,?)+", arg))
            elif arg.startswith("-") and not (argv[0] == "chattr" and arg[:1] in "+-="):
                continue
            else:
                operands.append(arg)
        return effects_on("read" if adds_only else "mode", operands, cwd, recursive)

    return handle


def _in_place(
    short: str = "", value_opts: str = "", first_is_expression: bool = False, always: bool = False
) -> Handler:
    """Tools that rewrite their file operands with a flag (``yq -i``, ``clang-format -i``,
    ``gofmt -w``) or always (``black``, ``dos2unix``): operands written, else read. With
    ``first_is_expression`` the first operand is the program's expression, not a file."""
    opts = frozenset(value_opts.split())

    def handle(argv: list[str], cwd: str) -> list[Effect]:
        args = argv[1:]
        operands = operands_of(args, opts)
        if first_is_expression and operands:
            operands = operands[1:]
        checking = any(a in ("--check", "--diff", "--dry-run", "-l", "--list-different") for a in args)
        writes = (always and not checking) or (short and has_flag(args, short, IN_PLACE_LONG))
        return effects_on("write" if writes else "read", operands, cwd)

    return handle


def _touch(argv: list[str], cwd: str) -> list[Effect]:
    return effects_on("write", operands_of(argv[1:], _TOUCH_VALUES), cwd)


def _truncate(argv: list[str], cwd: str) -> list[Effect]:
    return effects_on("write", operands_of(argv[1:], _TRUNCATE_VALUES), cwd)


def _mkdir(argv: list[str], cwd: str) -> list[Effect]:
    return effects_on("write", operands_of(argv[1:], _MKDIR_VALUES), cwd)


def _dd(argv: list[str], cwd: str) -> list[Effect]:
    out: list[Effect] = []
    for arg in argv[1:]:
        if arg.startswith("if="):
            out.extend(effects_on("read", [arg[3:]], cwd))
        elif arg.startswith("of="):
            out.extend(effects_on("write", [arg[3:]], cwd))
    return out


def _tee(argv: list[str], cwd: str) -> list[Effect]:
    op = "append" if has_flag(argv[1:], "a", ("--append",)) else "write"
    return effects_on(op, operands_of(argv[1:], _TEE_VALUES), cwd)


def _sort(argv: list[str], cwd: str) -> list[Effect]:
    args = argv[1:]
    opts = frozenset(
        split_names("-o -k -t -S -T --output --key --field-separator --buffer-size --temporary-directory")
    )
    out = effects_on("read", operands_of(args, opts), cwd)
    target = option_value(args, ("-o", "--output"))
    if target is not None:
        out.extend(effects_on("write", [target], cwd))
    return out


def _uniq(argv: list[str], cwd: str) -> list[Effect]:
    operands = operands_of(argv[1:], _UNIQ_VALUES)
    return [*effects_on("read", operands[:1], cwd), *effects_on("write", operands[1:2], cwd)]


def _curl(argv: list[str], cwd: str) -> list[Effect]:
    args = argv[1:]
    out: list[Effect] = []
    target = option_value(args, ("-o", "--output", "-O", "--output-document"))
    if (target is not None and argv[0] == "wget" and "-O" in args) or (
        target is not None and argv[0] == "curl"
    ):
        out.extend(effects_on("write", [target], cwd))
    upload = option_value(args, ("-T", "--upload-file"))
    if upload is not None:
        out.extend(effects_on("read", [upload], cwd))
    for value in (a for a in args if a.startswith("@")):
        out.extend(effects_on("read", [value[1:]], cwd))
    return out


CONTENT_HANDLERS: dict[str, Handler] = {
    **dict.fromkeys(
        split_names(
            "cat tac head tail less more nl od xxd hexdump hd strings wc md5sum sha1sum sha256sum "
            "sha512sum b2sum cksum sum base64 base32 file stat readlink realpath fold fmt expand "
            "unexpand rev column iconv cut paste join comm diff diff3 sdiff cmp bat batcat view zcat "
            "zless zmore bzcat xzcat zstdcat lz4cat jq yq xmllint csvlook json_pp python-json "
            "gunzip-c nm objdump readelf strings hexyl shasum openssl gpg sqlite3 source ."
        ),
        _reader("-n -c -d -f -s -t -w -k --bytes --lines --delimiter --fields --width -e -E -q"),
    ),
    **dict.fromkeys(["grep", "egrep", "fgrep", "rg", "ag", "ack", "ripgrep", "zgrep"], _grep),
    "sed": _sed,
    **dict.fromkeys(["awk", "gawk", "mawk", "nawk"], _awk),
    **dict.fromkeys(["perl", "ruby"], _perl_ruby),
    **dict.fromkeys(["chmod", "chown", "chgrp", "chattr"], _mode()),
    "setfacl": _mode(False),
    "touch": _touch,
    "truncate": _truncate,
    **dict.fromkeys(["mkdir", "mkfifo", "mknod"], _mkdir),
    "dd": _dd,
    "tee": _tee,
    "sponge": lambda argv, cwd: effects_on("write", operands_of(argv[1:]), cwd),
    **dict.fromkeys(
        ["vi", "vim", "nvim", "nano", "emacs", "ex", "ed", "red", "pico", "joe", "micro"],
        lambda argv, cwd: effects_on("write", operands_of(argv[1:], _EDITOR_VALUES), cwd),
    ),
    "sort": _sort,
    "uniq": _uniq,
    "yq": _in_place("i", "-o -I -p --output-format --input-format --indent", first_is_expression=True),
    "xmlstarlet": _in_place("L", "-N -u -v -t -n -s -i -a -d -r -x", first_is_expression=True),
    "sd": _in_place("", "-f --flags", first_is_expression=True, always=True),
    **dict.fromkeys(("crudini",), _in_place("", "", always=True)),
    **dict.fromkeys(("clang-format", "autopep8"), _in_place("i")),
    **dict.fromkeys(("gofmt", "goimports", "shfmt"), _in_place("w")),
    **dict.fromkeys(("prettier", "eslint", "stylelint"), _in_place("w")),
    **dict.fromkeys(
        ("black", "isort", "rustfmt", "dos2unix", "unix2dos", "mac2unix", "stylua"), _in_place(always=True)
    ),
    **dict.fromkeys(
        ["ls", "dir", "vdir", "tree", "du", "exa", "eza", "lsd"],
        _reader(
            "-I -w -T --ignore --width --tabsize --hide --block-size -L --max-depth -d -B",
            "R",
            "--recursive",
            op="list",
        ),
    ),
    **dict.fromkeys(["curl", "wget"], _curl),
    "patch": lambda argv, cwd: (
        effects_on(
            "write",
            operands_of(
                argv[1:],
                _PATCH_VALUES,
            )[:1],
            cwd,
        )
        + effects_on("read", [v] if (v := option_value(argv[1:], ("-i", "--input"))) else [], cwd)
    ),
}
