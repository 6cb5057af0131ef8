"""Sub-trajectory samples, packing into token-budgeted micro-batches, and collation to tensors."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class Sample:
    """One sub-trajectory as the trainer needs it (built from a store row or a synthetic episode).

    ``logprobs`` are the rollout policy's, aligned to the tokens (0 on mask-0 tokens);
    ``policy_version`` is the trainer step whose weights generated it; ``token_versions`` (when the
    weights changed while the episode was in flight: a partial rollout) gives the version of every
    token instead (read on action tokens only). ``reward`` is the episode's and is read only on its
    last sub-trajectory; ``task_group`` names the task's group (routing of distillation teachers).
    ``truncated`` says a limit ended the episode (``end_reason`` one of ``trainer.data``'s
    ``LIMIT_END_REASONS``); ``end_reason`` is the rollout's own word for how it ended, when known.
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
    token_versions: Sequence[int] | None = None
    task_group: str = ""
    end_reason: str | None = None

    def __post_init__(self) -> None:
        n = len(self.input_ids)
        if n == 0 or len(self.action_mask) != n or len(self.logprobs) != n:
            raise ValueError(
                f"sub-trajectory of episode {self.episode_id}/{self.sub_index}: token ids, action mask and "
                f"logprobs must be non-empty and the same length ({n}, {len(self.action_mask)}, "
                f"{len(self.logprobs)})"
            )
        if self.token_versions is not None and len(self.token_versions) != n:
            raise ValueError(
                f"sub-trajectory of episode {self.episode_id}/{self.sub_index}: {len(self.token_versions)} "
                f"token versions for {n} tokens"
            )

    def versions(self) -> list[int]:
        """The policy version of every token (``policy_version`` where no per-token versions exist)."""
        if self.token_versions is None:
            return [self.policy_version] * len(self.input_ids)
        return list(self.token_versions)

    def oldest_action_version(self) -> int:
        """The oldest version among the generated tokens (the row's staleness is measured from it)."""
        versions = [v for v, m in zip(self.versions(), self.action_mask, strict=True) if m]
        return min(versions, default=self.policy_version)


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
    stale: torch.Tensor  # [n, width] bool: action tokens produced by an older policy version
    expired: torch.Tensor  # [n, width] bool: action tokens older than max_staleness (masked from the loss)

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
                    self.expired,
                )
            )
        )


def collate(
    samples: Sequence[Sample],
    rows: Sequence[int],
    pad_id: int,
    current_version: int,
    max_staleness: int | None = None,
) -> TokenBatch:
    """Pad ``samples[rows]`` to the longest of them; ``stale`` marks action tokens from an older
    policy, ``expired`` those more than ``max_staleness`` versions older (none when it is None)."""
    chosen = [samples[i] for i in rows]
    width = max(len(s.input_ids) for s in chosen)
    n = len(chosen)
    input_ids = torch.full((n, width), pad_id, dtype=torch.long)
    attention = torch.zeros((n, width), dtype=torch.long)
    action = torch.zeros((n, width), dtype=torch.float32)
    logprobs = torch.zeros((n, width), dtype=torch.float32)
    versions = torch.full((n, width), current_version, dtype=torch.long)
    for r, s in enumerate(chosen):
        length = len(s.input_ids)
        input_ids[r, :length] = torch.as_tensor(s.input_ids, dtype=torch.long)
        attention[r, :length] = 1
        action[r, :length] = torch.as_tensor(s.action_mask, dtype=torch.float32)
        logprobs[r, :length] = torch.as_tensor(s.logprobs, dtype=torch.float32)
        versions[r, :length] = torch.as_tensor(s.versions(), dtype=torch.long)
    is_action = action.bool()
    stale = (versions < current_version) & is_action
    expired = torch.zeros_like(stale)
    if max_staleness is not None:
        expired = (versions < current_version - max_staleness) & is_action
    return TokenBatch(
        input_ids, attention, action, logprobs * action, torch.as_tensor(list(rows)), stale, expired
    )


def padding_batch(pad_id: int) -> TokenBatch:
    """A 1 x 2 micro-batch with no action token: it runs the forward/backward collectives of a real
    one (DDP, FSDP2) and adds no gradient, for ranks with fewer micro-batches than the others (or
    none at all). ``rows`` points at row 0 of the step's tensors, which it only reads under a zero mask."""
    zeros = torch.zeros((1, 2), dtype=torch.float32)
    no = torch.zeros((1, 2), dtype=torch.bool)
    return TokenBatch(
        torch.full((1, 2), pad_id, dtype=torch.long),
        torch.ones((1, 2), dtype=torch.long),
        zeros,
        zeros.clone(),
        torch.zeros(1, dtype=torch.long),
        no,
        no.clone(),
    )
