"""Review of a final patch: the stage-1 rules run over a unified diff, file by file.

Why: in ``pytest`` grading the project's tests run in the same process as the agent's code, so a
change that patches pytest, exits at import, returns always-equal objects or rewrites assertions
can win a reward no file restoration prevents. The guard already judges diffs an agent pipes to
``git apply`` or ``patch``: each file of the diff becomes the write (a new file) or the edit
(removed lines -> added lines) it amounts to, normalised and matched like the tool call that would
have made it. ``review_patch`` does exactly that for the whole final patch.

Verdict: ``tampering`` when a rule of a reviewed category (default ``grader_tampering`` and
``test_tampering``) would have decoyed the change outright; rules that would only have escalated
or flagged it are kept as ``suspect`` findings (evidence for the audit, no effect on the reward).
What a tampering verdict does to the reward is the caller's policy (``zero`` or ``flag``).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from guard.context import EpisodeState
from guard.normalize.shell import patch_hunks
from guard.paths import WORKSPACE
from guard.rules import RuleEngine
from guard.types import ToolCall

REVIEWED_CATEGORIES = ("grader_tampering", "test_tampering")
MAX_FILES = 2000


@dataclass(frozen=True)
class PatchFinding:
    """One file of the patch that a rule matched."""

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

    @property
    def suspect(self) -> bool:
        return bool(self.findings) and not self.tampering

    def to_dict(self) -> dict[str, Any]:
        return {
            "tampering": self.tampering,
            "suspect": self.suspect,
            "findings": [asdict(f) for f in self.findings],
            "files": self.files,
            "latency_us": round(self.latency_us, 1),
            "notes": list(self.notes),
        }


def _calls(patch_text: str) -> list[tuple[str, ToolCall]]:
    """Each file of the diff as the file-tool call that would make the same change."""
    calls: list[tuple[str, ToolCall]] = []
    for target, removed, added, created in patch_hunks(patch_text, WORKSPACE):
        if created:
            calls.append((target, ToolCall("write_file", {"path": target, "content": added})))
        else:
            calls.append(
                (target, ToolCall("edit_file", {"path": target, "old_str": removed, "new_str": added}))
            )
    return calls


def review_patch(
    patch_text: str,
    engine: RuleEngine,
    *,
    categories: tuple[str, ...] = REVIEWED_CATEGORIES,
    state: EpisodeState | None = None,
) -> PatchReview:
    """Stage-1 rules over every file of ``patch_text`` (a ``git diff``-style unified diff).

    With the episode's ``state``, each file is read with its memory (what the agent's calls wrote
    and ran) and the repository context, as its tool calls were."""
    started = time.perf_counter()
    calls = _calls(patch_text)
    notes: list[str] = []
    if len(calls) > MAX_FILES:
        notes.append(f"patch touches {len(calls)} files; the first {MAX_FILES} were reviewed")
        calls = calls[:MAX_FILES]
    findings: list[PatchFinding] = []
    for path, call in calls:
        match = (engine.evaluate(call, state.memory, state.repo) if state else engine.evaluate(call)).match
        if match is None or match.category not in categories:
            continue
        findings.append(PatchFinding(path, match.rule_id, match.category, match.action, match.description))
    tampering = any(f.action == "decoy" for f in findings)
    return PatchReview(
        tampering, tuple(findings), len(calls), (time.perf_counter() - started) * 1e6, tuple(notes)
    )
