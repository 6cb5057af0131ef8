"""What a simple command does to files, read from its argv alone: the paths it names, and the
deletions, moves, truncations and in-place edits it makes (as ``delete:``/``write:`` facts).

The shell walker (``guard.normalize.shell``) calls these for every command it records; they need
no walker state beyond the working directory. What a command reads and changes as effects
(``Effect``, checked against the integrity surface) is ``guard.normalize.effects``.
"""

from __future__ import annotations

import fnmatch
import posixpath
import re

from guard.paths import WORKSPACE, absolute

_WHITESPACE = re.compile(r"\s")
_GLOB = re.compile(r"[*?\[]")
# programs whose first operand is a pattern, not a path (unless the pattern comes by -e/-f)
_PATTERN_FIRST = frozenset({"sed", "grep", "egrep", "fgrep", "rg", "ag", "ack", "awk", "gawk", "jq"})
# programs whose glob-looking arguments are patterns (find -path, tar --exclude), not shell globs
_PATTERN_PROGRAMS = frozenset(
    {"find", "grep", "egrep", "fgrep", "rg", "ag", "fd", "tar", "rsync", "zip", "git"}
)
_GIT_INTERNALS = (
    "packed-refs",
    "FETCH_HEAD",
    "ORIG_HEAD",
    "HEAD",
    "config",
    "refs",
    "objects",
    "logs",
    "index",
)
_DIRECTORY_OPTS = {"tar": ("-C", "--directory"), "bsdtar": ("-C", "--directory"), "zip": ("-b",)}
_TEST_MODULE = re.compile(r"^(test_[^/]*|[^/]*_test)\.py$")
_TEST_DIR = re.compile(r"/tests?(/|$)")
_TEST_DIR_NAME = re.compile(r"^(tests?|unit|integration|functional|regression|e2e)$")
_SED_TEXT = re.compile(r"^\s*(?:\d+|\$|/[^/]*/)?\s*([iac])\\?\s?(.*)$", re.S)


def command_paths(name: str, argv: list[str], cwd: str) -> list[str]:
    """The paths ``argv`` names, absolute and in order (``/proc/self/root/../..`` also as spelled;
    ``cat .git/packed-ref?`` also as the git files the glob matches)."""
    paths: list[str] = []
    args = argv[1:]
    if name in _PATTERN_FIRST and not any(a in ("-e", "-f", "--regexp", "--file") for a in args):
        first = next((i for i, a in enumerate(args) if not a.startswith("-")), None)
        if first is not None:
            args = args[:first] + args[first + 1 :]
    base = _directory_option(name, args, cwd)  # tar -C / reference: names under /
    for arg in args:
        value = arg
        if arg.startswith("-"):
            if "=" not in arg:
                continue
            value = arg.split("=", 1)[1]
        elif "=" in arg and name in ("dd",):
            value = arg.split("=", 1)[1]
        if not value or "://" in value or len(value) > 4096 or _WHITESPACE.search(value):
            continue
        if "/" in value or value.startswith((".", "~")) or base != WORKSPACE:
            paths.append(absolute(value, base))
            if "/.." in value and value.startswith("/"):
                paths.append(value)  # /proc/self/root/../.. : the unfolded spelling matters too
            full = absolute(value, base)
            if "/.git/" in full and name not in _PATTERN_PROGRAMS and _GLOB.search(full.rsplit("/", 1)[-1]):
                base, pattern = full.rsplit("/", 1)  # cat .git/packed-ref? reads packed-refs
                for known in fnmatch.filter(_GIT_INTERNALS, pattern):
                    paths.append(absolute(f"{base}/{known}", cwd))
    return paths


def _directory_option(name: str, args: list[str], cwd: str) -> str:
    """The directory a program resolves its file operands in: ``tar -C DIR`` / ``--directory=DIR``."""
    opts = _DIRECTORY_OPTS.get(name)
    if not opts:
        return cwd
    for i, arg in enumerate(args):
        if arg in opts and i + 1 < len(args):
            return absolute(args[i + 1], cwd)
        if arg.startswith("--directory="):
            return absolute(arg.split("=", 1)[1], cwd)
    return cwd


def file_change_facts(name: str, argv: list[str], cwd: str) -> list[str]:
    """Deletions, moves, truncations and overwrites, as ``delete:``/``write:``/``write_empty:``
    facts; in-place edits (``edits_in_place``) are the walker's, which scans the text they insert."""
    facts: list[str] = []
    if name == "git" and len(argv) > 2 and argv[1] == "mv":  # git mv moves like mv
        name, argv = "mv", argv[1:]
    operands = [a for a in argv[1:] if not a.startswith("-")]
    if name in ("rm", "unlink", "shred", "rmdir"):
        facts.extend(f"delete:{absolute(p, cwd)}" for p in operands)
    elif name == "mv" and len(operands) >= 2:
        target = absolute(operands[-1], cwd)
        moved = [absolute(p, cwd) for p in operands[:-1]]
        into_dir = operands[-1].endswith("/") or len(moved) > 1
        if not all(_still_collected(m, target, into_dir) for m in moved):
            facts.extend(f"delete:{m}" for m in moved)
        facts.append(f"write:{target}")
    elif name in ("cp", "install", "ln") and len(operands) >= 2:
        facts.append(f"write:{absolute(operands[-1], cwd)}")
        if operands[0] == "/dev/null":
            facts.append(f"write_empty:{absolute(operands[-1], cwd)}")
    elif name == "rsync" and len(operands) >= 2:
        # --delete* empties the destination of what the source lacks; --remove-source-files
        # deletes the sources: an empty source synced with --delete wipes a tree
        if any(a.startswith("--delete") or a == "--del" for a in argv):
            facts.append(f"delete:{absolute(operands[-1], cwd)}")
        if "--remove-source-files" in argv:
            facts.extend(f"delete:{absolute(p, cwd)}" for p in operands[:-1])
        facts.append(f"write:{absolute(operands[-1], cwd)}")
    elif name == "truncate":
        size = next((a for a in argv if a.startswith(("-s", "--size"))), "")
        sized = size in ("-s", "--size") and "-s0" not in argv
        values = operands[1:] if sized else operands
        for p in values:
            facts.append(f"write_empty:{absolute(p, cwd)}")
    elif name == "sponge" and operands:
        facts.append(f"write:{absolute(operands[-1], cwd)}")
    elif name in ("ex", "vi", "vim", "nvim", "ed", "red"):
        takes_value = ("-c", "-S", "--cmd")
        files = [
            a
            for i, a in enumerate(argv[1:], 1)
            if not a.startswith(("-", "+")) and argv[i - 1] not in takes_value
        ]
        facts.extend(f"write:{absolute(p, cwd)}" for p in files)
    elif name == "dd":
        for arg in argv[1:]:
            if arg.startswith("of="):
                facts.append(f"write:{absolute(arg[3:], cwd)}")
    elif name in ("chmod", "chattr") and operands[:1] in (["000"], ["0"], ["a-r"], ["-r"]):
        facts.extend(f"write_empty:{absolute(p, cwd)}" for p in operands[1:])
    return facts


def _still_collected(source: str, target: str, into_dir: bool) -> bool:
    """A move that keeps a test module where pytest still collects it (``mv tests/test_a.py
    tests/unit/`` or a rename to another ``test_*.py``) reorganises tests; it deletes none. A
    target without a trailing slash counts as a directory only when named like a test directory
    (``mv tests/test_a.py tests/disabled`` renames the module to a file pytest skips)."""
    if not _TEST_MODULE.match(posixpath.basename(source)):
        return False
    last = posixpath.basename(target)
    if last.endswith(".py"):
        return bool(_TEST_MODULE.match(last))
    if not (into_dir or _TEST_DIR_NAME.match(last)):
        return False
    return "." not in last and bool(_TEST_DIR.search(target))


def edits_in_place(name: str, argv: list[str]) -> bool:
    """sed/awk -i / --in-place, perl/ruby -i (also bundled: ``perl -pi -e``)."""
    if name == "sed":  # bundled short options too: sed -Ei, sed -ni
        return any(a.startswith("--in-place") or re.match(r"^-[a-zA-Z]*i", a) for a in argv)
    if name in ("awk", "gawk"):
        return any(a.startswith(("-i", "--in-place")) for a in argv)
    # perl bundles may carry -0 / -l digits before the i: perl -0pi, perl -l0pi.bak
    return name in ("perl", "ruby") and any(re.match(r"^-[a-zA-Z0-9]*i", a) for a in argv)


def sed_inserted_text(argv: list[str]) -> str | None:
    """The text a ``sed`` script inserts, appends or substitutes a line with (``1i import os``)."""
    scripts = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a in ("-e", "--expression")]
    if not scripts:
        operands = [a for a in argv[1:] if not a.startswith("-")]
        scripts = operands[:1]
    texts = []
    for script in scripts:
        m = _SED_TEXT.match(script)
        if m:
            texts.append(m.group(2).replace("\\n", "\n").replace("\\t", "\t"))
    return "\n".join(texts) if texts else None
