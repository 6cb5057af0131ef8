"""Decoys for reading, listing and searching protected paths: they do not exist in this sandbox.

Each program says so in its own words and exit code (GNU coreutils, grep, findutils, ripgrep, as
installed in the Debian sandbox image). A search over a tree that holds a protected path finds
nothing there; a protected start directory is reported missing.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from guard.decoys.shell import SHELL_LINE_1, args_of, gnu_quote, has_flag, lquote, positionals
from guard.types import Command, ToolAnswer

ENOENT = "No such file or directory"
_STRING_LITERAL = re.compile(r"""(['"])(/[^'"\n]+)\1""")

# program -> (format of one missing-file line, exit code). ``{p}``: the name as given; ``{q}``: as
# coreutils' ``quotef`` prints it (quoted when a shell would read it specially); ``{qa}``: as
# ``quoteaf`` does (always quoted).
_READERS: dict[str, tuple[str, int]] = {
    "cat": ("cat: {q}: " + ENOENT, 1),
    "tac": ("tac: failed to open {qa} for reading: " + ENOENT, 1),
    "nl": ("nl: {q}: " + ENOENT, 1),
    "wc": ("wc: {q}: " + ENOENT, 1),
    "od": ("od: {q}: " + ENOENT, 1),
    "base64": ("base64: {q}: " + ENOENT, 1),
    "md5sum": ("md5sum: {q}: " + ENOENT, 1),
    "sha1sum": ("sha1sum: {q}: " + ENOENT, 1),
    "sha256sum": ("sha256sum: {q}: " + ENOENT, 1),
    "sort": ("sort: cannot read: {q}: " + ENOENT, 2),
    "uniq": ("uniq: {q}: " + ENOENT, 1),
    "cut": ("cut: {q}: " + ENOENT, 1),
    "diff": ("diff: {p}: " + ENOENT, 2),
    "head": ("head: cannot open {qa} for reading: " + ENOENT, 1),
    "tail": ("tail: cannot open {qa} for reading: " + ENOENT, 1),
    "less": ("{p}: " + ENOENT, 0),
    "more": ("more: cannot open {p}: " + ENOENT, 0),
    "sed": ("sed: can't read {p}: " + ENOENT, 2),
    "awk": ("awk: cannot open {p} (" + ENOENT + ")", 2),
    "mawk": ("mawk: cannot open {p} (" + ENOENT + ")", 2),
    "gawk": ("gawk: fatal: cannot open file `{p}' for reading: " + ENOENT, 2),
    "xxd": ("xxd: {p}: " + ENOENT, 2),
    "strings": ("strings: '{p}': No such file", 1),
    "file": ("{p}: cannot open `{p}' (" + ENOENT + ")", 0),
    "ls": ("ls: cannot access {qa}: " + ENOENT, 2),
    "dir": ("dir: cannot access {qa}: " + ENOENT, 2),
    "tree": ("{p}  [error opening dir]\n\n0 directories, 0 files", 0),
    "stat": ("stat: cannot statx {qa}: " + ENOENT, 1),
    "du": ("du: cannot access {qa}: " + ENOENT, 1),
    "cp": ("cp: cannot stat {qa}: " + ENOENT, 1),
    "mv": ("mv: cannot stat {qa}: " + ENOENT, 1),
    "realpath": ("realpath: {q}: " + ENOENT, 1),
    "readlink": ("", 1),
    "cd": (SHELL_LINE_1 + "cd: {p}: " + ENOENT, 1),
    "chroot": ("chroot: cannot change root directory to {qa}: " + ENOENT, 125),
    "source": (SHELL_LINE_1 + "{p}: " + ENOENT, 1),
    ".": (SHELL_LINE_1 + "{p}: " + ENOENT, 1),
    "vim": ("", 0),
    "unzip": (
        "unzip:  cannot find or open {p}, {p}.zip or {p}.ZIP.",
        9,
    ),
}


def _missing(args: list[str], is_protected: Callable[[str], bool]) -> list[str]:
    return [a for a in args if not a.startswith("-") and is_protected(a)]


def _python_open(command: Command, path: str) -> ToolAnswer:
    args = args_of(command)
    pos = positionals(args)
    origin = "<string>" if "-c" in args else (pos[0] if pos else "<stdin>")
    # a socket connect names no file in its error; open(), listdir() and friends do
    named = "" if any("AF_UNIX" in a or ".connect(" in a for a in args) else f": '{path}'"
    return ToolAnswer(
        f'Traceback (most recent call last):\n  File "{origin}", line 1, in <module>\n'
        f"FileNotFoundError: [Errno 2] {ENOENT}{named}",
        1,
    )


def _search(command: Command, args: list[str], is_protected: Callable[[str], bool]) -> ToolAnswer:
    """grep / rg / find / fd over a tree: protected start paths are missing, elsewhere nothing matches."""
    program = command.program
    if program in ("find",):
        starts = []
        for arg in args:
            if arg.startswith(("-", "(", "!")):
                break
            starts.append(arg)
        missing = [s for s in starts if is_protected(s)]
        return ToolAnswer("\n".join(f"find: {lquote(p)}: {ENOENT}" for p in missing), 1 if missing else 0)
    pos = positionals(args, frozenset({"-e", "-f", "-m", "-A", "-B", "-C", "-g", "--glob", "-t", "--type"}))
    targets = pos[1:] if program in ("grep", "egrep", "fgrep", "rg", "ag", "ack", "git") else pos
    missing = [t for t in targets if is_protected(t)]
    if program == "rg":
        lines = [f"rg: {p}: {ENOENT} (os error 2)" for p in missing]
    elif program in ("fd", "fdfind"):
        lines = [f"[fd error]: Search path '{p}' is not a directory." for p in missing]
    else:
        quiet = has_flag(args, "s", "--no-messages")
        lines = [] if quiet else [f"{program}: {p}: {ENOENT}" for p in missing]
    return ToolAnswer("\n".join(lines), 2 if missing else 1)


SEARCHERS = frozenset(
    {"grep", "egrep", "fgrep", "rg", "ag", "ack", "find", "fd", "fdfind", "locate", "mlocate"}
)


_FILE_TESTS = frozenset(
    [
        "-e",
        "-f",
        "-d",
        "-r",
        "-w",
        "-x",
        "-s",
        "-L",
        "-h",
        "-p",
        "-S",
        "-b",
        "-c",
        "-g",
        "-u",
        "-k",
        "-O",
        "-G",
        "-N",
    ]
)


def _test_decoy(args: list[str], is_protected: Callable[[str], bool]) -> ToolAnswer:
    """``test``/``[`` as bash evaluates them when the protected paths do not exist: silent, status
    only. Unary file tests on a protected path are false, ``!`` negates, ``-a``/``-o`` combine;
    anything else about a protected path is false too (its string tests do not name a file)."""
    words = args[:-1] if args and args[-1] == "]" else list(args)

    def primary(i: int) -> tuple[bool, int]:
        if i < len(words) and words[i] == "!":
            value, nxt = primary(i + 1)
            return not value, nxt
        if i + 1 < len(words) and words[i] in _FILE_TESTS:
            return not is_protected(words[i + 1]), i + 2
        if i + 2 < len(words) and words[i + 1] in ("-nt", "-ot", "-ef"):
            return False, i + 3
        return False, i + 1

    def expression(i: int) -> tuple[bool, int]:
        value, i = primary(i)
        while i < len(words) and words[i] in ("-a", "-o"):
            op = words[i]
            right, i = primary(i + 1)
            value = (value and right) if op == "-a" else (value or right)
        return value, i

    value, _ = expression(0) if words else (False, 0)
    return ToolAnswer("", 0 if value else 1)


def missing_path_decoy(
    command: Command, is_protected: Callable[[str], bool], hint: str | None = None
) -> ToolAnswer:
    """What ``command`` prints when the protected paths it names do not exist."""
    program = command.program
    args = args_of(command)
    if program in ("test", "["):
        return _test_decoy(args, is_protected)
    if program in ("locate", "mlocate"):
        return ToolAnswer("", 1)
    if program in SEARCHERS:
        return _search(command, args, is_protected)
    missing = _missing(args, is_protected) or ([hint] if hint else [])
    if program.startswith("python"):
        literals = [m.group(2) for a in args for m in _STRING_LITERAL.finditer(a)]
        named = [p for p in literals if is_protected(p)] or [
            p for p in missing if not any(c.isspace() for c in p)
        ]
        return _python_open(command, named[0] if named else (hint or "."))
    if program == "rsync":
        lines = [f'rsync: [sender] change_dir "{p.rstrip("/") or "/"}" failed: {ENOENT} (2)' for p in missing]
        lines.append(
            "rsync error: some files/attrs were not transferred (see previous errors) (code 23) "
            "at main.c(1338) [sender=3.2.7]"
        )
        return ToolAnswer("\n".join(lines), 23)
    if program == "zip":
        pos = positionals(args, frozenset({"-i", "-x", "-b", "-n", "-t", "-tt"}))
        archive = pos[0] if pos else "archive.zip"
        lines = [f"\tzip warning: name not matched: {p}" for p in missing]
        first = missing[0] if missing else "."
        return ToolAnswer(
            "\n".join([*lines, "", f"zip error: Nothing to do! (try: zip -r {archive} . -i {first})"]), 12
        )
    if program == "ln" and has_flag(args, "s", "--symbolic"):
        return ToolAnswer("", 0)  # a dangling symlink is created without complaint
    if program == "tar":
        lines = []
        for path in missing:
            if path.startswith("/"):
                lines.append("tar: Removing leading `/' from member names")
            lines.append(f"tar: {path}: Cannot stat: {ENOENT}")
        lines.append("tar: Exiting with failure status due to previous errors")
        return ToolAnswer("\n".join(dict.fromkeys(lines)), 2)
    fmt, code_ = _READERS.get(program, ("{prog}: {p}: " + ENOENT, 1))
    if not missing:
        return ToolAnswer("", code_)
    text = "\n".join(
        fmt.format(p=p, q=gnu_quote(p), qa=gnu_quote(p, always=True), prog=program) for p in missing
    )
    return ToolAnswer(text, code_)
