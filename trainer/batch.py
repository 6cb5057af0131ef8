"""Sub-trajectory samples, packing into token-budgeted micro-batches, and collation to tensors."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class Sample:
    """One sub-trajectory as the trainer needs it (built from a store row or a synthetic episode).

    ``logprobs`` are the rollout policy's, aligned to the tokens (0 on mask-0 tokens);
    ``policy_version`` is the trainer step whose weights generated it. ``reward`` is the episode's
    and is read only on its last sub-trajectory.
    """

    input_ids: Sequence[int]
    action_mask: Sequence[int]
    logprobs: Sequence[float]
    episode_id: int
    sub_index: int
    is_last: bool
    truncated: bool
    reward: float
    group_id: int
    policy_version: int = 0
    record_id: int | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        n = len(self.input_ids)
        if n == 0 or len(self.action_mask) != n or len(self.logprobs) != n:
            raise ValueError(
                f"sub-trajectory of episode {self.episode_id}/{self.sub_index}: token ids, action mask and "
                f"logprobs must be non-empty and the same length ({n}, {len(self.action_mask)}, "
                f"{len(self.logprobs)})"
            )


def pack_by_token_budget(lengths: Sequence[int], token_budget: int) -> list[list[int]]:
    """Indices grouped into micro-batches whose padded size (rows x longest row) fits the budget.

    Sorting by length and filling greedily puts rows of similar length together, so padding stays
    small (each row is padded at most to the longest row of its own micro-batch); a row longer than
    the budget gets a micro-batch of its own.
    """
    order = sorted(range(len(lengths)), key=lambda i: lengths[i], reverse=True)
    batches: list[list[int]] = []
    for index in order:
        if batches and (len(batches[-1]) + 1) * lengths[batches[-1][0]] <= token_budget:
            batches[-1].append(index)
        else:
            batches.append([index])
    return batches


def padding_fraction(lengths: Sequence[int], batches: Sequence[Sequence[int]]) -> float:
    """Share of padded positions in the packed micro-batches (0 = no waste)."""
    real = sum(lengths)
    padded = sum(len(b) * max(lengths[i] for i in b) for b in batches)
    return 1.0 - real / padded if padded else 0.0


@dataclass
class TokenBatch:
    """Right-padded tensors for a set of samples; ``rows`` indexes them in the step's full batch."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    action_mask: torch.Tensor
    rollout_logprobs: torch.Tensor
    rows: torch.Tensor
    stale: torch.Tensor

    @property
    def num_action_tokens(self) -> int:
        return int(self.action_mask.sum())

    def to(self, device: torch.device) -> TokenBatch:
        return TokenBatch(
            *(
                t.to(device)
                for t in (
                    self.input_ids,
                    self.attention_mask,
                    self.action_mask,
                    self.rollout_logprobs,
                    self.rows,
                    self.stale,
                )
            )
        )


def collate(samples: Sequence[Sample], rows: Sequence[int], pad_id: int, current_version: int) -> TokenBatch:
    """Pad ``samples[rows]`` to the longest of them; ``stale`` marks data from an older policy."""
    chosen = [samples[i] for i in rows]
    width = max(len(s.input_ids) for s in chosen)
    n = len(chosen)
    input_ids = torch.full((n, width), pad_id, dtype=torch.long)
    attention = torch.zeros((n, width), dtype=torch.long)
    action = torch.zeros((n, width), dtype=torch.float32)
    logprobs = torch.zeros((n, width), dtype=torch.float32)
    for r, s in enumerate(chosen):
        length = len(s.input_ids)
        input_ids[r, :length] = torch.as_tensor(s.input_ids, dtype=torch.long)
        attention[r, :length] = 1
        action[r, :length] = torch.as_tensor(s.action_mask, dtype=torch.float32)
        logprobs[r, :length] = torch.as_tensor(s.logprobs, dtype=torch.float32)
    stale = torch.tensor([s.policy_version < current_version for s in chosen])
    return TokenBatch(input_ids, attention, action, logprobs * action, torch.as_tensor(list(rows)), stale)
