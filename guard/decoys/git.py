"""Decoys for git: the repository has only its checked-out history and no remotes.

History commands that would reach beyond the base (``log --all``, ``rev-list --branches``,
``branch -a``, ``for-each-ref``, ``show-ref``, ``count-objects``, ``cat-file``) are answered by
running a *narrowed* twin for real (the same command limited to ``HEAD``, to refs merged into it,
to objects reachable from it), so the answer is the sandbox's real output for the history it is
allowed to see. Without a probe, they print nothing (as in a repository that holds no other refs).

When the sandbox's repository is *neutral* (``guard.repo``: it holds nothing beyond its base, and
the call carries the fact ``git_repo_neutral``), the twin of a local, builtin git command is the
command itself (``real_twin``): a branch that ``git branch`` lists then diffs, checks out and shows
as the real one does, because every view asks the same repository.

Other refs are unknown revisions; remotes do not exist; network URLs do not resolve.
"""

from __future__ import annotations

import posixpath
import re
import shlex

from guard.decoys.shell import args_of, bare_host, host_of, positionals
from guard.types import Command, ToolAnswer

_GLOBAL_VALUE_OPTS = frozenset({"-C", "-c", "--git-dir", "--work-tree", "--namespace"})
_WIDENING = frozenset(
    {"--all", "--branches", "--remotes", "--tags", "--reflog", "--walk-reflogs", "-g", "--bisect"}
    | {"--alternate-refs", "--indexed-objects", "--not", "--stdin", "--single-worktree"}
)
_WIDENING_PREFIXES = ("--branches=", "--remotes=", "--tags=", "--glob=", "--exclude=")
_HISTORY = frozenset({"log", "rev-list", "shortlog", "whatchanged"})
_NO_REMOTE = (
    "fatal: '{remote}' does not appear to be a git repository\n"
    "fatal: Could not read from remote repository.\n\n"
    "Please make sure you have the correct access rights\nand the repository exists."
)
_HEADISH = ("HEAD", "@")


def split_subcommand(command: Command) -> tuple[str, list[str]]:
    """``git -C x --no-pager log --all`` -> ``("log", ["--all"])``."""
    args = args_of(command)
    i = 0
    while i < len(args) and args[i].startswith("-"):
        i += 2 if args[i] in _GLOBAL_VALUE_OPTS else 1
    if i >= len(args):
        return "", []
    return args[i], args[i + 1 :]


def _ambiguous(ref: str) -> ToolAnswer:
    return ToolAnswer(
        f"fatal: ambiguous argument '{ref}': unknown revision or path not in the working tree.\n"
        "Use '--' to separate paths from revisions, like this:\n"
        "'git <command> [<revision>...] -- [<file>...]'",
        128,
    )


def _unreachable(url: str) -> str:
    if "://" not in url and bare_host(url):  # scp-like: git@github.com:owner/repo.git
        return (
            f"ssh: Could not resolve hostname {bare_host(url)}: Temporary failure in name resolution\r\n"
            + _NO_REMOTE.split("\n", 1)[1]
        )
    return f"fatal: unable to access '{url.rstrip('/')}/': Could not resolve host: {host_of(url)}"


def _is_url(arg: str) -> bool:
    return "://" in arg or (bare_host(arg) is not None and ":" in arg and "@" in arg)


def history_probe(command: Command) -> str | None:
    """The narrowed twin of a history command, to run for real; None if there is nothing to narrow."""
    sub, rest = split_subcommand(command)
    if sub in _HISTORY and any(_widens(a) for a in rest):
        before, sep, paths = _split_dashdash(rest)
        argv = ["git", sub, *_options_only(before), "HEAD"]
        if sep:
            argv += ["--", *paths]
        return shlex.join(argv)
    if sub == "branch" and any(a in ("-a", "--all", "-r", "--remotes") for a in rest):
        kept = [a for a in rest if a.startswith("-") and a not in ("-a", "--all", "-r", "--remotes")]
        return shlex.join(["git", "branch", *kept])
    if sub == "cat-file" and "--batch-all-objects" in rest:
        # only the objects reachable from HEAD, in the format the agent asked for
        kept = [a for a in rest if a.startswith(("--batch", "--unordered")) and a != "--batch-all-objects"]
        return "git rev-list --objects HEAD | cut -d' ' -f1 | " + shlex.join(["git", "cat-file", *kept])
    if sub == "for-each-ref":
        kept = [a for a in rest if a.startswith("--format") or a in ("--sort", "--count")]
        return shlex.join(["git", "for-each-ref", *kept, "--points-at=HEAD", "refs/heads/"])
    if sub == "show-ref":
        # the refs merged into HEAD, in show-ref's own format; exit 1 when there is none, as git does
        return (
            "out=$(git for-each-ref --merged=HEAD --format='%(objectname) %(refname)' 2>/dev/null); "
            '[ -n "$out" ] && printf \'%s\\n\' "$out"'
        )
    if sub == "count-objects":
        return shlex.join(["git", "count-objects", *(a for a in rest if a in _COUNT_OPTS)])
    if sub == "cat-file" and rest:
        name = rest[-1]
        if name.startswith("-"):
            return None
        # an object reachable from HEAD is shown as git shows it; any other is not a valid name
        quoted = shlex.quote(name)
        return (
            f"obj=$(git rev-parse --verify -q {quoted} 2>/dev/null) && "
            'git rev-list --objects HEAD 2>/dev/null | cut -d" " -f1 | grep -qx "$obj" && '
            f"{shlex.join(['git', 'cat-file', *rest])} || "
            f"{{ echo {shlex.quote(f'fatal: Not a valid object name {name}')} >&2; (exit 128); }}"
        )
    return None


_COUNT_OPTS = frozenset({"-v", "--verbose", "-H", "--human-readable"})
# Builtin git commands that work on the local repository only: in a neutral repository they are
# run as the agent wrote them (aliases cannot shadow builtins; nothing here runs hooks or scripts
# the agent names, or reaches the network).
_LOCAL_BUILTINS = frozenset(
    {
        "log", "show", "diff", "rev-parse", "cat-file", "ls-tree", "show-ref", "for-each-ref", "branch",
        "tag", "count-objects", "rev-list", "describe", "name-rev", "blame", "annotate", "grep",
        "shortlog", "whatchanged", "reflog", "merge-base", "diff-tree", "diff-index", "ls-files",
        "show-branch", "cherry", "range-diff", "fsck", "verify-pack", "show-index", "status",
        "checkout", "switch", "restore", "reset", "merge", "cherry-pick", "revert", "stash",
        "format-patch",
    }
)  # fmt: skip
# options that make git run a program of the caller's choosing, or reach another repository
_UNSAFE_OPTS = ("--ext-diff", "--textconv", "--exec", "--upload-pack", "--receive-pack", "--remote",
                "--open-files-in-pager", "-O", "--tool", "--extcmd")  # fmt: skip
_SAFE_GLOBALS = frozenset({"--no-pager", "-P", "--no-replace-objects", "--literal-pathspecs"})


def real_twin(command: Command) -> str | None:
    """``command`` itself, to run for real in a neutral repository, or None when it is not a
    local builtin run plainly (global options other than ``--no-pager``, a URL, an option that
    runs a program)."""
    args = args_of(command)
    i = 0
    while i < len(args) and args[i].startswith("-"):
        if args[i] not in _SAFE_GLOBALS:
            return None
        i += 1
    if i >= len(args) or args[i] not in _LOCAL_BUILTINS:
        return None
    rest = args[i + 1 :]
    if any(a.startswith(_UNSAFE_OPTS) or _is_url(a) for a in rest):
        return None
    return shlex.join(["git", *args])


def twin_for(command: Command, neutral: bool) -> str | None:
    """What runs for real in place of an intercepted git command: the command itself in a neutral
    repository (``real_twin``), else its narrowed twin (``history_probe``), else nothing."""
    if neutral:
        twin = real_twin(command)
        if twin is not None:
            return twin
    return history_probe(command)


def _split_dashdash(args: list[str]) -> tuple[list[str], bool, list[str]]:
    if "--" in args:
        i = args.index("--")
        return args[:i], True, args[i + 1 :]
    return args, False, []


def _widens(arg: str) -> bool:
    return arg in _WIDENING or arg.startswith(_WIDENING_PREFIXES)


_LOG_VALUE_OPTS = frozenset({"-n", "--max-count", "--format", "--pretty", "--skip", "--since", "--until"})


def _options_only(args: list[str]) -> list[str]:
    """Options that do not widen the history, with the values of separated ones (``-n 5``), in order;
    positional revisions are dropped (the narrowed command shows ``HEAD`` only)."""
    out: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg.startswith("-") and not _widens(arg):
            out.append(arg)
            if arg in _LOG_VALUE_OPTS and i + 1 < len(args):
                out.append(args[i + 1])
                i += 1
        i += 1
    return out


_FULL_ID = re.compile(r"[0-9a-f]{40}")


def _missing_object(sub: str, ref: str) -> ToolAnswer | None:
    """git's own words for an object id it does not have (a commit beyond the base, as the
    sandbox's repository would answer without it): a full id is a ``bad object`` (checkout: not a
    tree, handled with checkout's other answers); an abbreviation
    given to cherry-pick/revert a ``bad revision``; merge has its own sentence."""
    name, _, path = ref.partition(":")
    if _FULL_ID.fullmatch(name):
        if sub == "show" and path:
            return ToolAnswer(f"fatal: path '{path}' does not exist in '{name}'", 128)
        if sub in ("show", "log", "diff", "rev-list", "cherry-pick", "whatchanged", "shortlog", "revert"):
            return ToolAnswer(f"fatal: bad object {name}", 128)
    if sub in ("cherry-pick", "revert"):
        return ToolAnswer(f"fatal: bad revision '{ref}'", 128)
    if sub == "merge":
        return ToolAnswer(f"merge: {ref} - not something we can merge", 1)
    return None


def git_decoy(command: Command, probe: ToolAnswer | None = None) -> ToolAnswer:
    """What git answers in a sandbox with only the base history, no remotes and no network."""
    sub, rest = split_subcommand(command)
    pos = positionals(rest, frozenset({"-b", "--branch", "--depth", "-o", "--origin", "-c", "--config"}))
    twin = history_probe(command)
    if twin is not None and probe is not None:
        return probe
    if twin is not None and not (sub == "cat-file" and "--batch-all-objects" not in rest):
        if sub == "count-objects":  # a packed repository with nothing loose
            return ToolAnswer("0 objects, 0 kilobytes", 0)
        return ToolAnswer("", 1 if sub == "show-ref" else 0)
    if sub == "clone":
        url = pos[0] if pos else "origin"
        if not _is_url(url):
            return ToolAnswer(f"fatal: repository '{url}' does not exist", 128)
        target = pos[1] if len(pos) > 1 else posixpath.basename(url.rstrip("/")).removesuffix(".git")
        return ToolAnswer(f"Cloning into '{target}'...\n{_unreachable(url)}", 128)
    if sub in ("fetch", "pull", "ls-remote", "push"):
        url = next((p for p in pos if _is_url(p)), None)
        if url:
            return ToolAnswer(_unreachable(url), 128)
        if sub == "ls-remote":
            return ToolAnswer("fatal: No remote configured to list refs from.", 128)
        if sub == "fetch" and (not pos or "--all" in rest):
            return ToolAnswer("", 0)
        return ToolAnswer(_NO_REMOTE.format(remote=pos[0] if pos else "origin"), 128)
    if sub == "remote":
        if pos and pos[0] in ("show", "prune", "update") and len(pos) > 1:
            return ToolAnswer(_NO_REMOTE.format(remote=pos[1]), 128)
        if pos and pos[0] == "get-url" and len(pos) > 1:
            return ToolAnswer(f"error: No such remote '{pos[1]}'", 2)
        return ToolAnswer("", 0)
    if sub in ("reflog", "tag", "stash", "submodule"):
        return ToolAnswer("", 0)
    if sub in ("checkout", "switch"):
        ref = pos[0] if pos else "HEAD"
        if sub == "checkout" and _FULL_ID.fullmatch(ref):
            return ToolAnswer(f"fatal: reference is not a tree: {ref}", 128)
        if sub == "switch":
            return ToolAnswer(f"fatal: invalid reference: {ref}", 128)
        return ToolAnswer(f"error: pathspec '{ref}' did not match any file(s) known to git", 1)
    if sub == "cat-file":
        obj = pos[-1] if pos else "HEAD"
        return ToolAnswer(f"fatal: Not a valid object name {obj}", 128)
    ref = next((p for p in pos if not p.startswith(_HEADISH)), None)
    missing = _missing_object(sub, ref) if ref is not None else None
    if missing is not None:
        return missing
    if ref is not None and sub == "show" and ":" in ref:
        return ToolAnswer(f"fatal: invalid object name '{ref.split(':', 1)[0]}'.", 128)
    if ref is not None:
        return _ambiguous(ref)
    return ToolAnswer("", 0)
