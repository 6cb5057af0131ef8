"""Review of a final workspace: the stage-1 rules over everything the agent changed that can run.

Why: in ``pytest`` grading the project's tests run in the same process as the agent's code, so a
change that patches pytest, exits at import, returns always-equal objects or rewrites assertions
can win a reward no file restoration prevents. The guard already judges what a tool call writes;
``review_changes`` judges the final state of every changed file the same way, so how the file got
there (a write, a move of an innocent-looking file, a ``git apply``) does not matter:

* **every file that can run is read**, whatever its encoding: Python sources are decoded as Python
  decodes them (PEP 263 coding lines, BOM), other text as UTF-8 or, failing that, Latin-1;
* **what changed, with its context**: of a modified module, the top-level statements and class
  members that differ from the base, whole (a new ``__eq__`` is read inside its class), plus the
  imports they use; a new file whole. Code the base already had is not the agent's;
* **symlinks resolved**: one that leaves the workspace or points into ``.git/`` is tampering; one
  inside it is read as the file it names, under the link's own (importable) path;
* **what cannot be reviewed is said**: compiled code (``.so``, ``.pyd``, ``.pyc``), start-up hooks
  (``.pth``) and importable files under ``.git/`` are findings; a file over the per-file cap, the
  guard's own limits, or the review's overall budget leave the review **incomplete**, which the
  policy treats as suspect (``guard.review_policy``);
* **every match of every reviewed category** is kept, not only the most severe per file.

Verdict: ``tampering`` when a rule of a reviewed category (default ``grader_tampering`` and
``test_tampering``) would have decoyed the change outright, or a structural finding says so; rules
that would only have escalated or flagged it are kept as ``suspect`` findings. ``review_patch``
reads a unified diff instead, for callers that only have the text (``rlguard tasks check``,
a stored episode).
"""

from __future__ import annotations

import ast
import codecs
import io
import time
import tokenize
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from guard.context import EpisodeState
from guard.normalize.patches import patch_hunks
from guard.paths import WORKSPACE
from guard.rules import RuleEngine
from guard.types import ToolCall

REVIEWED_CATEGORIES = ("grader_tampering", "test_tampering")
MAX_FILES = 5000
MAX_FILE_BYTES = 1024 * 1024
MAX_TOTAL_BYTES = 64 * 1024 * 1024
MAX_REVIEW_SECONDS = 60.0
CODE_SUFFIXES = (".py", ".pyw", ".pyi")
COMPILED_SUFFIXES = (".so", ".pyd", ".pyc", ".pyo")
STARTUP_SUFFIXES = (".pth",)


@dataclass(frozen=True)
class ChangedFile:
    """One path of the final workspace that differs from the task's base (built by the grader).

    ``data`` is the final content (a file's, or for a symlink that resolves to a file inside the
    workspace, that file's), cut at ``MAX_FILE_BYTES`` + 1 so a cut is visible; ``size`` is the
    full size. ``base`` is the base's content at ``path``, when it had a file there. For symlinks:
    ``target`` as stored, ``resolved`` the workspace-relative path it leads to (None when it leaves
    the workspace or leads nowhere), ``escapes`` whether it leaves the workspace.
    """

    path: str
    kind: Literal["file", "symlink", "removed"]
    data: bytes | None = None
    base: bytes | None = None
    size: int = 0
    target: str | None = None
    resolved: str | None = None
    escapes: bool = False


@dataclass(frozen=True)
class PatchFinding:
    """One file of the patch that a rule (or the review's structure checks) matched."""

    path: str
    rule_id: str
    category: str
    action: str  # what the rule asks for: decoy | escalate | flag
    description: str


@dataclass(frozen=True)
class PatchReview:
    """The guard's verdict on a patch; ``to_dict`` is what is stored with the episode."""

    tampering: bool
    findings: tuple[PatchFinding, ...] = ()
    files: int = 0
    latency_us: float = 0.0
    notes: tuple[str, ...] = field(default_factory=tuple)
    complete: bool = True

    @property
    def suspect(self) -> bool:
        return (bool(self.findings) or not self.complete) and not self.tampering

    def to_dict(self) -> dict[str, Any]:
        return {
            "tampering": self.tampering,
            "suspect": self.suspect,
            "complete": self.complete,
            "findings": [asdict(f) for f in self.findings],
            "files": self.files,
            "latency_us": round(self.latency_us, 1),
            "notes": list(self.notes),
        }


# ------------------------------------------------------------------------------ reading files
def decode_python(data: bytes) -> str | None:
    """Source text as the interpreter reads it (PEP 263 coding line or BOM, else UTF-8); None when
    it cannot be decoded, in which case Python cannot import it either."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        text = data.decode(encoding)
    except (SyntaxError, LookupError, UnicodeDecodeError, ValueError):
        return None
    return text[1:] if text.startswith("\ufeff") else text


def decode_text(data: bytes) -> str:
    """Any other text: UTF-8, else Latin-1 (every byte string decodes)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return codecs.decode(data, "latin-1")


def _lines_of(text: str, node: ast.AST) -> str:
    start = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))])  # type: ignore[attr-defined]
    return "".join(text.splitlines(keepends=True)[start - 1 : node.end_lineno])  # type: ignore[attr-defined]


def _names_used(nodes: list[ast.AST]) -> set[str]:
    names = set()
    for node in nodes:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name):
                names.add(sub.id)
    return names


def _bound_names(node: ast.Import | ast.ImportFrom) -> set[str]:
    return {(alias.asname or alias.name).split(".")[0] for alias in node.names}


def _class_delta(text: str, new: ast.ClassDef, old: ast.ClassDef) -> tuple[str, list[ast.AST]]:
    """A changed class: its header and the members that differ from the base's class."""
    before = Counter(ast.dump(member) for member in old.body)
    header_end = new.body[0].lineno - 1 if new.body else new.end_lineno  # type: ignore[attr-defined]
    start = min([new.lineno, *(d.lineno for d in new.decorator_list)])
    lines = text.splitlines(keepends=True)
    parts = ["".join(lines[start - 1 : header_end])]
    changed: list[ast.AST] = []
    for member in new.body:
        key = ast.dump(member)
        if before[key] > 0:
            before[key] -= 1
            continue
        changed.append(member)
        parts.append(_lines_of(text, member))
    if not changed:
        indent = " " * (new.col_offset + 4)
        parts.append(f"{indent}pass\n")
    return "".join(parts), changed


def changed_python(base: str | None, final: str) -> str:
    """What of ``final`` the agent wrote: all of it for a new file (or one that does not parse); for
    a modified module, the statements and class members that differ from ``base``, with the imports
    they use."""
    if base is None:
        return final
    try:
        tree, old = ast.parse(final), ast.parse(base)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return final
    before = Counter(ast.dump(node) for node in old.body)
    old_classes = {node.name: node for node in old.body if isinstance(node, ast.ClassDef)}
    units: list[str] = []
    used: list[ast.AST] = []
    imports: list[ast.Import | ast.ImportFrom] = []
    for node in tree.body:
        key = ast.dump(node)
        if before[key] > 0:
            before[key] -= 1
            if isinstance(node, ast.Import | ast.ImportFrom):
                imports.append(node)
            continue
        if isinstance(node, ast.ClassDef) and node.name in old_classes:
            text, members = _class_delta(final, node, old_classes[node.name])
            units.append(text)
            used.extend([*members, *node.bases, *node.decorator_list])
        else:
            units.append(_lines_of(final, node))
            used.append(node)
    if not units:
        return ""
    needed = _names_used(used)
    context = [_lines_of(final, node) for node in imports if _bound_names(node) & needed]
    return "".join(context) + "\n" + "\n".join(units)


# ------------------------------------------------------------------------------ reviewing
@dataclass
class _Run:
    engine: RuleEngine
    categories: tuple[str, ...]
    state: EpisodeState | None
    findings: list[PatchFinding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    complete: bool = True

    def structural(self, path: str, rule: str, action: str, description: str) -> None:
        self.findings.append(PatchFinding(path, f"review.{rule}", "grader_tampering", action, description))

    def incomplete(self, note: str) -> None:
        self.complete = False
        self.notes.append(note)

    def rules(self, path: str, call: ToolCall) -> None:
        """Every matching rule of a reviewed category (not only the most severe)."""
        state = self.state
        result = self.engine.evaluate(call, state.memory, state.repo) if state else self.engine.evaluate(call)
        normalized = result.normalized
        if normalized.parse_error is not None:
            self.incomplete(f"{path}: the guard cannot read it ({normalized.parse_error[:200]})")
            return
        programs = {c.program for c in normalized.commands}
        seen: set[str] = set()
        for rule in self.engine.rules:
            hit = rule.evaluate(normalized, programs, self.engine.protected)
            if hit is None or hit.category not in self.categories or hit.rule_id in seen:
                continue
            seen.add(hit.rule_id)
            self.findings.append(PatchFinding(path, hit.rule_id, hit.category, hit.action, hit.description))


def _importable(path: str) -> bool:
    return path.endswith(CODE_SUFFIXES)


def _order(change: ChangedFile) -> tuple[int, str]:
    """Code and links first: under a budget, what can run is read before what cannot."""
    runs = _importable(change.path) or change.kind == "symlink" or change.path.endswith(COMPILED_SUFFIXES)
    return (0 if runs else 1, change.path)


def _review_one(run: _Run, change: ChangedFile) -> None:
    path, full = change.path, f"{WORKSPACE}/{change.path}"
    parts = path.split("/")
    if change.kind == "removed":
        return
    if change.kind == "symlink":
        if change.escapes:
            run.structural(
                path, "symlink_escape", "decoy", f"symlink leaves the workspace: -> {change.target}"
            )
            return
        if change.resolved is not None and change.resolved.split("/")[0] == ".git":
            run.structural(path, "symlink_into_git", "decoy", f"symlink into .git/: -> {change.target}")
            return
        if change.data is None:
            return  # a link to a directory or to nothing: the files it reaches are reviewed on their own
    if parts[0] == ".git":
        if _importable(path) or path.endswith(COMPILED_SUFFIXES + STARTUP_SUFFIXES):
            run.structural(path, "code_under_git", "decoy", "importable code stored under .git/")
        else:
            return
    if path.endswith(COMPILED_SUFFIXES):
        run.structural(path, "compiled_code", "decoy", "compiled code cannot be reviewed")
        return
    if path.endswith(STARTUP_SUFFIXES):
        run.structural(path, "startup_hook", "decoy", ".pth files run code at interpreter start-up")
    data = change.data or b""
    if change.size > MAX_FILE_BYTES or len(data) > MAX_FILE_BYTES:
        run.incomplete(f"{path}: {change.size} bytes, over the {MAX_FILE_BYTES}-byte review cap")
        data = data[:MAX_FILE_BYTES]
    if _importable(path):
        text = decode_python(data)
        if text is None:
            run.notes.append(f"{path}: does not decode as Python source (it cannot be imported)")
            return
        base = decode_python(change.base) if change.base is not None else None
        text = changed_python(base, text)
        if not text.strip():
            return
    elif b"\0" in data[:8192]:
        run.notes.append(f"{path}: binary data, not importable")
        return
    else:
        text = decode_text(data)
    if change.base is not None and change.kind == "file":
        # an existing file changed in place (the project's own module): what a tool call editing it
        # would be, so rules that tell a new file from an edit of the repository's own read it so
        call = ToolCall("edit_file", {"path": full, "old_str": "", "new_str": text})
    else:
        call = ToolCall("write_file", {"path": full, "content": text})
    run.rules(path, call)


def review_changes(
    changes: Sequence[ChangedFile],
    engine: RuleEngine,
    *,
    categories: tuple[str, ...] = REVIEWED_CATEGORIES,
    state: EpisodeState | None = None,
) -> PatchReview:
    """The rules over every changed file that can run (see the module docstring).

    With the episode's ``state``, each file is read with its memory (what the agent's calls wrote
    and ran) and the repository context, as its tool calls were."""
    started = time.perf_counter()
    run = _Run(engine, categories, state)
    ordered = sorted(changes, key=_order)
    total = 0
    reviewed = 0
    for index, change in enumerate(ordered):
        if (
            index >= MAX_FILES
            or total > MAX_TOTAL_BYTES
            or time.perf_counter() - started > MAX_REVIEW_SECONDS
        ):
            run.incomplete(
                f"{len(ordered) - index} of {len(ordered)} changed files not reviewed (review budget)"
            )
            break
        total += len(change.data or b"")
        reviewed += 1
        _review_one(run, change)
    return _verdict(run, reviewed, started)


def _verdict(run: _Run, files: int, started: float) -> PatchReview:
    tampering = any(f.action == "decoy" for f in run.findings)
    return PatchReview(
        tampering,
        tuple(run.findings),
        files,
        (time.perf_counter() - started) * 1e6,
        tuple(run.notes[:50]),
        run.complete,
    )


def review_patch(
    patch_text: str | Sequence[ChangedFile],
    engine: RuleEngine,
    *,
    categories: tuple[str, ...] = REVIEWED_CATEGORIES,
    state: EpisodeState | None = None,
) -> PatchReview:
    """Stage-1 rules over every file of ``patch_text`` (a ``git diff``-style unified diff), each
    file's hunks read as the edit they amount to. Only the diff is known then: given the changed
    files themselves (what the grader hands over), this is ``review_changes``."""
    if not isinstance(patch_text, str):
        return review_changes(patch_text, engine, categories=categories, state=state)
    started = time.perf_counter()
    run = _Run(engine, categories, state)
    hunks = patch_hunks(patch_text, WORKSPACE)
    if len(hunks) > MAX_FILES:
        run.incomplete(f"patch touches {len(hunks)} files; the first {MAX_FILES} were reviewed")
        hunks = hunks[:MAX_FILES]
    for target, removed, added, created in hunks:
        path = target.removeprefix(f"{WORKSPACE}/")
        if created:
            call = ToolCall("write_file", {"path": target, "content": added})
        else:
            call = ToolCall("edit_file", {"path": target, "old_str": removed, "new_str": added})
        run.rules(path, call)
    return _verdict(run, len(hunks), started)
