"""Helpers shared by the rollout tests."""

from __future__ import annotations

from dataclasses import dataclass, field

from rollout.policy import Generation, Sampling


def stored_rows(store, episode_id: str) -> list[dict]:
    """Export rows (one per sub-trajectory) of one episode, in index order, whatever its status."""
    statuses = ("finished", "timed_out", "interrupted", "failed")
    rows = [r for r in store.iter_export_rows(statuses) if r["episode_id"] == episode_id]
    return sorted(rows, key=lambda r: r["sub_index"])


def mask_runs(mask: list[int]) -> list[tuple[int, int]]:
    """(start, end) of each maximal run of 1s."""
    runs, start = [], None
    for i, bit in enumerate([*mask, 0]):
        if bit and start is None:
            start = i
        elif not bit and start is not None:
            runs.append((start, i))
            start = None
    return runs


@dataclass
class RecordingPolicy:
    """Wraps a TokenPolicy and keeps every (prompt ids, generation) it served."""

    inner: object
    calls: list[tuple[list[int], Generation]] = field(default_factory=list)

    @property
    def policy_version(self) -> str:
        return self.inner.policy_version

    @property
    def trainable(self) -> bool:
        return self.inner.trainable

    async def generate(self, prompt_ids: list[int], sampling: Sampling) -> Generation:
        generation = await self.inner.generate(prompt_ids, sampling)
        self.calls.append((list(prompt_ids), generation))
        return generation
