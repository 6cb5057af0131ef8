"""git's own command line, seen through: global options before the sub-command, ``-c key=value``
settings and aliases (``git -C . --no-pager -c alias.l='log --all' l`` is ``git log --all``).

Rules match the canonical form, and the shell walker reads the settings that run a program
(``core.pager``, ``core.sshCommand``, a ``!`` alias) as shell text of their own.
"""

from __future__ import annotations

_GIT_VALUE_OPTS = frozenset(
    {"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--exec-path", "--config-env"}
)

# settings whose value git runs as a command (lower-cased keys)
GIT_EXEC_KEYS = frozenset(
    {
        "core.pager",
        "core.sshcommand",
        "core.editor",
        "core.fsmonitor",
        "diff.external",
        "credential.helper",
        "sequence.editor",
        "gpg.program",
        "core.hookspath",
        "pager.log",
        "pager.diff",
        "pager.show",
    }
)


def git_config_pairs(argv: list[str]) -> list[tuple[str, str]]:
    """``git -c key=value`` pairs given before the sub-command."""
    pairs: list[tuple[str, str]] = []
    for i, arg in enumerate(argv[:-1]):
        if arg == "-c" and "=" in argv[i + 1]:
            key, _, value = argv[i + 1].partition("=")
            pairs.append((key, value))
    return pairs


def canonical_git(argv: list[str], known_aliases: dict[str, str] | None = None) -> list[str]:
    """``git -C . --no-pager -c alias.l='log --all' l`` → ``git log --all``: global options
    dropped, a command-line alias expanded."""
    aliases: dict[str, str] = dict(known_aliases or {})
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg in _GIT_VALUE_OPTS and i + 1 < len(argv):
            if arg == "-c" and argv[i + 1].startswith("alias."):
                key, _, value = argv[i + 1][6:].partition("=")
                aliases[key] = value
            i += 2
            continue
        if arg.startswith("-"):
            i += 1
            continue
        break
    rest = argv[i:]
    if rest and rest[0] in aliases:
        expansion = aliases[rest[0]].lstrip("!").split()
        rest = expansion + rest[1:]
    return ["git", *rest]
