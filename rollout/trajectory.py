"""The sub-trajectory record as the rollout produces it (DESIGN.md "Trajectory record").

Tokens are only ever appended, each with its mask bit and logprob, so ``token_ids``,
``action_mask`` and ``logprobs`` stay aligned by construction: mask 1 exactly on tokens the policy
generated in THIS sub-trajectory (their logprobs are the policy's), mask 0 and logprob 0.0 on the
prompt, tool answers, runner-added markup and context carried over from an earlier sub-trajectory.

``version_spans`` records which policy version produced each generated span: ``[start, end,
version]`` over token positions (end exclusive), one per generation, merged when consecutive
generations came from the same version. A sub-trajectory whose spans carry more than one version is
*mixed-version*: the weights were swapped while its episode was in flight (a partial rollout), and
the trainer corrects or drops each span by its own staleness.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class SubTrajectory:
    index: int
    policy_version: str
    trainable: bool = True
    token_ids: list[int] = field(default_factory=list)
    action_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    version_spans: list[list[int | str]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.token_ids)

    def add_context(self, ids: list[int]) -> None:
        """Tokens the policy did not generate here (prompt, tool answers, carried-over turns)."""
        self.token_ids.extend(ids)
        self.action_mask.extend([0] * len(ids))
        self.logprobs.extend([0.0] * len(ids))

    def add_generated(self, ids: list[int], logprobs: list[float], version: str | None = None) -> None:
        """Tokens the policy generated, with the logprobs it reported and the version that served them."""
        if len(ids) != len(logprobs):
            raise ValueError(f"{len(ids)} generated tokens but {len(logprobs)} logprobs")
        start = len(self.token_ids)
        self.token_ids.extend(ids)
        self.action_mask.extend([1] * len(ids))
        self.logprobs.extend(logprobs)
        if ids:
            self._record_span(start, len(self.token_ids), version or self.policy_version)

    def _record_span(self, start: int, end: int, version: str) -> None:
        last = self.version_spans[-1] if self.version_spans else None
        if last is not None and last[2] == version:
            last[1] = end  # same version; what lies between is context (mask 0): one span
        else:
            self.version_spans.append([start, end, version])

    @property
    def versions(self) -> list[str]:
        """The distinct policy versions of the generated spans, in order of first use."""
        return list(dict.fromkeys(str(span[2]) for span in self.version_spans))

    @property
    def mixed_version(self) -> bool:
        return len(self.versions) > 1

    @property
    def num_action_tokens(self) -> int:
        return sum(self.action_mask)

    def to_record(self) -> dict[str, Any]:
        """The body of ``POST /v1/episodes/{id}/subtrajectories``."""
        return {
            "index": self.index,
            "token_ids": self.token_ids,
            "action_mask": self.action_mask,
            "logprobs": self.logprobs,
            "policy_version": self.policy_version,
            "trainable": self.trainable,
            "version_spans": self.version_spans,
        }
