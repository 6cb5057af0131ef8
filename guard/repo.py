"""Repository context: what the task repository holds beyond its base, so git calls are judged
with knowledge instead of guesses.

``git show a11f950`` is a leak exactly when ``a11f950`` is a commit the task's base does not
contain (a future fix kept in the image); the text alone cannot tell. At episode start the gateway
asks the sandbox once (``PROBE_SCRIPTS``) for the base (``HEAD``), the commits reachable from any
ref or reflog entry but not from the base, the refs and the reflog, and builds a ``RepoContext``.
``git_facts`` then reads every git command of a call and names, as facts, the objects and refs it
touches beyond the base (``git_beyond_base:<word>``), history searches (``git_history_search:<flag>``
when no context is known) and object names it could not check (``git_unverified:<word>``).

Everything is bounded: at most ``MAX_BEYOND`` commits, ``MAX_REFS`` refs and ``MAX_REFLOG``
entries are kept; a context cut at a bound is ``truncated`` and then an unknown object name is
unverified (escalated), never silently allowed.

**A neutral repository.** Decoys cannot hide part of a repository consistently: ``ls .git/refs`` can
be answered "No such file" but ``[ -d .git/refs ]``, ``find``, globbing or Python's ``os.scandir``
still see it, and ``git branch`` lists a branch whose ``git diff`` is then an "unknown revision". So
the last probe (``NEUTRALISE_SCRIPT``), run once the context is read, makes the repository hold
nothing beyond its base: every ref that is not an ancestor of the base is pointed at the base (a
honeypot branch still shows in ``git branch``, and holds the base), stash and reflogs are dropped,
and unreachable objects are pruned (packs rewritten when there are any). Every view of ``.git`` then
tells the same truth, so git plumbing and reads of ``.git`` run for real (rules stand down on the
fact ``git_repo_neutral``), while naming a ref or commit that *was* beyond is still intercepted and
recorded, and answered by the same command run in the neutral repository
(``guard.decoys.git.real_twin``).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from guard.types import Command

MAX_BEYOND = 1500
MAX_REFS = 600
MAX_REFLOG = 200
_HEX = re.compile(r"^[0-9a-f]{4,40}$")
_SHA = re.compile(r"^[0-9a-f]{40}$")
_REFLOG = re.compile(r"^(?P<name>[^@]*)@\{(?P<n>-?\d+)\}$")
_SUFFIX = re.compile(r"(?:\^\{[^}]*\}|[~^]\d*)+$")
# sub-commands whose non-option words name revisions (a word after ``--`` is a path)
_REV_COMMANDS = frozenset(
    {
        "show", "diff", "log", "checkout", "switch", "cherry-pick", "cat-file", "ls-tree", "archive",
        "reset", "merge", "rebase", "format-patch", "blame", "rev-list", "shortlog", "whatchanged",
        "difftool", "range-diff", "describe", "name-rev", "restore", "revert", "grep", "diff-tree",
        "rev-parse", "branch", "worktree", "tag", "stash", "notes", "annotate", "merge-base",
    }
)  # fmt: skip
_SEARCH_COMMANDS = frozenset({"log", "rev-list", "shortlog", "whatchanged"})
_SEARCH_FLAGS = ("--grep", "-S", "-G", "--find-object")
# options whose next word is a value, not a revision
_VALUE_OPTS = frozenset(
    {
        "-n", "--max-count", "--skip", "-L", "--format", "--pretty", "-C", "-c", "--since", "--until",
        "--after", "--before", "-U", "--unified", "-m", "-b", "-B", "-t", "--date", "-o", "--output",
        "--prefix", "--remote", "-x", "-X", "--strategy", "--relative", "-e", "-f",
    }
)  # fmt: skip
_SOURCE_OPTS = ("--source=", "-s=")


@dataclass(frozen=True)
class RepoContext:
    """The task repository at episode start: its base and what lies beyond it."""

    head: str | None  # the base commit (None: the workspace is not a git repository)
    beyond: tuple[str, ...] = ()  # sorted full ids reachable from a ref or reflog, not from the base
    refs: Mapping[str, str] = field(default_factory=dict)  # full ref name -> commit id
    reflog: tuple[str, ...] | None = ()  # HEAD@{0}, HEAD@{1}, ... as commit ids (None: not known)
    truncated: bool = False
    neutral: bool = False  # the sandbox's repository holds nothing beyond the base (module docstring)

    @classmethod
    def build(
        cls,
        head: str | None,
        beyond: Iterable[str] = (),
        refs: Mapping[str, str] | None = None,
        reflog: Sequence[str] | None = (),
        truncated: bool = False,
        neutral: bool = False,
    ) -> RepoContext:
        """A bounded, normalised context (ids lower-cased, cut at the bounds with ``truncated``)."""
        ids = sorted({b.lower() for b in beyond if _SHA.match(b.lower())})
        ref_items = list((refs or {}).items())
        cut = len(ids) > MAX_BEYOND or len(ref_items) > MAX_REFS or len(reflog or ()) > MAX_REFLOG
        return cls(
            head=head.lower() if head else None,
            beyond=tuple(ids[:MAX_BEYOND]),
            refs={k: v.lower() for k, v in ref_items[:MAX_REFS]},
            reflog=None if reflog is None else tuple(r.lower() for r in reflog[:MAX_REFLOG]),
            truncated=truncated or cut,
            neutral=neutral,
        )

    @classmethod
    def from_mapping(cls, data: Mapping[str, object]) -> RepoContext:
        """From a corpus row's ``repo`` object: ``head``, ``beyond`` or (``commits`` minus
        ``ancestors``), ``refs`` ({name: id}), ``reflog`` (ids, newest first; absent: not known,
        so reflog entries are unverified rather than taken as empty)."""
        head = data.get("head")
        beyond = data.get("beyond")
        if beyond is None:
            commits, ancestors = data.get("commits") or [], set(data.get("ancestors") or [])  # type: ignore[arg-type]
            beyond = [c for c in commits if c not in ancestors]  # type: ignore[union-attr]
        return cls.build(
            str(head) if head else None,
            [str(b) for b in beyond],  # type: ignore[union-attr]
            {str(k): str(v) for k, v in dict(data.get("refs") or {}).items()},  # type: ignore[call-overload]
            [str(r) for r in data["reflog"]] if data.get("reflog") is not None else None,  # type: ignore[union-attr]
            bool(data.get("truncated", False)),
            bool(data.get("neutral", False)),
        )

    def _commit_beyond(self, word: str) -> bool | None:
        """True: an abbreviation of a commit beyond the base; False: not one; None: cannot say."""
        i = bisect.bisect_left(self.beyond, word)
        if i < len(self.beyond) and self.beyond[i].startswith(word):
            return True
        return None if self.truncated else False

    def _ref(self, name: str) -> str | None:
        for full in (name, f"refs/{name}", f"refs/heads/{name}", f"refs/tags/{name}", f"refs/remotes/{name}"):
            sha = self.refs.get(full)
            if sha is not None:
                return sha
        return None

    def classify(self, word: str) -> str:
        """``beyond`` (names something past the base), ``unverified`` or ``ok`` for one revision."""
        if self.head is None:
            return "ok"
        m = _REFLOG.match(word)
        if m:
            n = int(m.group("n"))
            if m.group("name") not in ("", "HEAD") or n < 0 or self.reflog is None:
                return "unverified"
            if n >= len(self.reflog):
                return "unverified" if self.truncated else "ok"
            return "beyond" if self._commit_beyond(self.reflog[n]) else "ok"
        base = _SUFFIX.sub("", word)
        if base in ("", "HEAD", "@"):
            return "ok"
        if base in ("FETCH_HEAD", "ORIG_HEAD", "MERGE_HEAD", "CHERRY_PICK_HEAD"):
            return "unverified"  # not probed: ORIG_HEAD may be where a reset to the base started
        lowered = base.lower()
        if _HEX.match(lowered):
            if self.head.startswith(lowered):
                return "ok"
            found = self._commit_beyond(lowered)
            if found:
                return "beyond"
            if found is None:
                return "unverified"
        sha = self._ref(base)
        if sha is not None:
            return "beyond" if self._commit_beyond(sha) else "ok"
        return "unverified" if self.truncated and self.refs else "ok"  # a cut ref list may lack it

    def reflog_beyond(self) -> bool | None:
        """Whether a reflog entry lies beyond the base (None: the reflog is not known)."""
        if self.reflog is None:
            return None
        return any(self._commit_beyond(sha) for sha in self.reflog)


def _revisions(args: Sequence[str]) -> tuple[list[str], list[str]]:
    """(revision words, history-search flags) of a git sub-command's arguments."""
    revs: list[str] = []
    searches: list[str] = []
    skip = False
    for i, arg in enumerate(args):
        if skip:
            skip = False
            continue
        if arg == "--":
            break
        if arg.startswith(_SOURCE_OPTS):
            revs.append(arg.split("=", 1)[1])
            continue
        flag = next((f for f in _SEARCH_FLAGS if arg == f or arg.startswith(f + "=") or (
            len(f) == 2 and arg.startswith(f) and len(arg) > 2)), None)  # fmt: skip
        if flag is not None:
            searches.append(flag)
            skip = arg == flag and i + 1 < len(args)
            continue
        if arg.startswith("-"):
            # ``-n 5`` counts commits (log); ``cherry-pick -n SHA`` does not take a value
            nxt = args[i + 1] if i + 1 < len(args) else ""
            skip = arg in _VALUE_OPTS and (arg != "-n" or nxt.isdigit())
            continue
        for part in re.split(r"\.\.\.?", arg):
            rev = part.split(":", 1)[0]
            if rev:
                revs.append(rev)
    return revs, searches


def git_facts(commands: Iterable[Command], repo: RepoContext | None) -> list[str]:
    """Facts about the git commands of a call, decided with ``repo`` when it is known."""
    facts: list[str] = []
    named = 0  # revision words other than HEAD that the context placed within the base
    for cmd in commands:
        if cmd.program != "git" or len(cmd.argv) < 2:
            continue
        if any(a.startswith(":/") for a in cmd.argv):  # ``:/text``: a message search over every ref
            facts.append("git_history_search::/")
        argv = list(cmd.argv[1:])
        while argv and argv[0].startswith("-"):  # global options: -C dir, -c k=v, --no-pager, ...
            opt = argv.pop(0)
            if opt in ("-C", "-c", "--git-dir", "--work-tree", "--namespace") and argv:
                argv.pop(0)
        if not argv:
            continue
        sub, args = argv[0], argv[1:]
        if sub == "reflog" or (sub == "log" and any(a in ("-g", "--walk-reflogs") for a in args)):
            beyond = repo.reflog_beyond() if repo is not None else None
            if beyond is None:
                facts.append("git_unverified:reflog")
            elif beyond:
                facts.append("git_beyond_base:reflog")
            continue
        if sub not in _REV_COMMANDS:
            continue
        revs, searches = _revisions(args)
        if sub in ("branch", "tag", "worktree", "stash", "notes"):
            revs = revs[1:] if sub in ("branch", "tag", "worktree") else []  # first word is a name
        if repo is None:
            facts.extend(f"git_history_search:{s}" for s in searches if sub in _SEARCH_COMMANDS)
            facts.extend(f"git_unverified:{r}" for r in revs if _HEX.match(r.lower()) and len(r) >= 7)
            facts.extend(f"git_unverified:{r}" for r in revs if "@{" in r)
            continue
        for rev in revs:
            kind = repo.classify(rev)
            if kind != "ok":
                facts.append(f"git_{'beyond_base' if kind == 'beyond' else 'unverified'}:{rev}")
            elif _SUFFIX.sub("", rev) not in ("HEAD", "@", ""):
                named += 1
    if repo is not None and repo.head is not None and named and not facts:
        # every ref and id the call names is the base or an ancestor: the text rules that escalate
        # or decoy a named ref (``git show v1.0:path``, ``git log origin/main``) stand down
        facts.append("git_all_within_base")
    return facts


NEUTRAL_DONE = "rlguard-neutral-done"
NEUTRAL_CLEAN = "rlguard-neutral-clean"
# Run after the context is read (module docstring): nothing beyond the base is left in the sandbox.
# Fast when there is nothing to do (one rev-list); otherwise a prune of the task's small repository
# (loose refs and objects stay loose: the layout is what the task built, less what lay beyond).
NEUTRALISE_SCRIPT = (
    "git rev-parse -q --verify HEAD >/dev/null || exit 1; "
    'if [ -z "$(git rev-list -n 1 --all --reflog --not HEAD 2>/dev/null)" ] '
    '&& ! git rev-parse -q --verify refs/stash >/dev/null; then echo ' + NEUTRAL_CLEAN + "; exit 0; fi; "
    'head=$(git rev-parse HEAD) && gitdir=$(git rev-parse --git-dir) || exit 1; '
    "git for-each-ref --format='%(refname)' | while IFS= read -r ref; do "
    'if [ "$ref" = refs/stash ]; then git update-ref -d refs/stash || exit 1; '
    'elif ! git merge-base --is-ancestor "$ref" "$head" 2>/dev/null; then '
    'git update-ref --no-deref "$ref" "$head" || exit 1; fi; done || exit 1; '
    'rm -f "$gitdir/ORIG_HEAD" "$gitdir/FETCH_HEAD" "$gitdir/MERGE_HEAD" "$gitdir/CHERRY_PICK_HEAD"; '
    "git reflog expire --expire=now --expire-unreachable=now --all && git prune --expire=now || exit 1; "
    '{ [ -z "$(ls "$gitdir"/objects/pack/*.pack 2>/dev/null)" ] || git repack -a -d -q; } || exit 1; '
    '[ -z "$(git rev-list -n 1 --all --reflog --not HEAD)" ] || exit 1; '
    "echo " + NEUTRAL_DONE
)

# Commands the gateway runs once per episode in the sandbox, in this order (each answer is kept
# under the exec output cap by its own bound); ``parse_probe`` reads their outputs back.
PROBE_SCRIPTS: dict[str, str] = {
    "head": "git rev-parse --verify -q HEAD",
    "refs": f"git for-each-ref --format='%(objectname) %(*objectname) %(refname)' | head -n {MAX_REFS + 1}",
    "reflog": f"git reflog --format=%H -n {MAX_REFLOG + 1} 2>/dev/null || true",
    "beyond": f"git rev-list --all --reflog --not HEAD | head -n {MAX_BEYOND + 1}",
    "neutral": NEUTRALISE_SCRIPT,
}


def parse_probe(outputs: Mapping[str, tuple[str, int]]) -> RepoContext:
    """A context from the (output, exit code) of each ``PROBE_SCRIPTS`` command."""
    head_out, head_rc = outputs.get("head", ("", 1))
    head = head_out.strip().lower()
    if head_rc != 0 or not _SHA.match(head):
        return RepoContext(head=None)
    refs: dict[str, str] = {}
    for line in outputs.get("refs", ("", 0))[0].splitlines():
        parts = line.split()
        if len(parts) == 3:
            refs[parts[2]] = parts[1]
        elif len(parts) == 2:
            refs[parts[1]] = parts[0]
    reflog = [x for x in outputs.get("reflog", ("", 0))[0].split() if _SHA.match(x)]
    beyond_out, beyond_rc = outputs.get("beyond", ("", 1))
    beyond = [x for x in beyond_out.split() if _SHA.match(x)]
    truncated = beyond_rc != 0 or any(rc != 0 for _, rc in outputs.values())
    neutral_out, neutral_rc = outputs.get("neutral", ("", 1))
    marks = neutral_out.split()
    neutral = neutral_rc == 0 and (NEUTRAL_DONE in marks or (NEUTRAL_CLEAN in marks and not beyond))
    return RepoContext.build(head, beyond, refs, reflog, truncated, neutral)


def neutral_facts(repo: RepoContext | None) -> list[str]:
    """``git_repo_neutral`` when the sandbox's repository holds nothing beyond its base: reading
    ``.git`` or enumerating refs and objects then reveals nothing, and runs for real."""
    return ["git_repo_neutral"] if repo is not None and repo.head is not None and repo.neutral else []
