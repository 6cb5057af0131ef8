"""Sub-trajectory rows: where a row's action tokens are, which row follows which, where the reward sits.

A row is one sub-trajectory: the exact tokens the policy saw and produced, with ``action_mask`` 1 on
the tokens the policy generated and 0 on prompt, tool-output and padding tokens. An episode is one or
more rows (a new one starts at each compaction), identified by ``episode_ids`` and ordered by
``sub_index``. Every estimator (``trainer.advantages``) reads rows through these helpers, so the
bookkeeping of episodes cut into rows is written once.
"""

import torch


def check_token_tensors(action_mask: torch.Tensor, *tensors: torch.Tensor) -> None:
    """Refuse token tensors whose shape is not the action mask's ``[B, T]``."""
    if action_mask.dim() != 2:
        raise ValueError(f"action_mask must be [B, T], got shape {tuple(action_mask.shape)}")
    for tensor in tensors:
        if tensor.shape != action_mask.shape:
            raise ValueError(
                f"shape {tuple(tensor.shape)} does not match action_mask {tuple(action_mask.shape)}"
            )


def float_dtype(*tensors: torch.Tensor) -> torch.dtype:
    """The floating dtype that holds every given tensor's values (at least float32)."""
    dtype = torch.float32
    for tensor in tensors:
        if tensor.is_floating_point():
            dtype = torch.promote_types(dtype, tensor.dtype)
    return dtype


def last_action_index(action_mask: torch.Tensor) -> torch.Tensor:
    """Index of each row's last action token; -1 for rows without one."""
    positions = torch.arange(action_mask.shape[1], device=action_mask.device)
    return torch.where(action_mask.bool(), positions, -1).max(dim=1).values


def first_action_index(action_mask: torch.Tensor) -> torch.Tensor:
    """Index of each row's first action token; -1 for rows without one."""
    width = action_mask.shape[1]
    positions = torch.arange(width, device=action_mask.device)
    first = torch.where(action_mask.bool(), positions, width).min(dim=1).values
    return torch.where(first == width, -1, first)


def place_episode_rewards(
    action_mask: torch.Tensor,
    rewards: torch.Tensor,
    is_last: torch.Tensor,
    drop: torch.Tensor | None = None,
) -> torch.Tensor:
    """Token rewards ``[B, T]``: each episode's reward on the last action token of its last row.

    ``rewards[b]`` is row b's episode reward (read only where ``is_last[b]``). Rows where ``drop``
    is True get no reward: a limit ending bootstrapped from the critic (``bootstrap_truncated``)
    must not also carry its graded reward, or the return target would be ``R + V``.
    """
    token_rewards = torch.zeros(action_mask.shape, dtype=float_dtype(rewards), device=action_mask.device)
    last = last_action_index(action_mask)
    placed = is_last.bool() if drop is None else is_last.bool() & ~drop.bool()
    rows = torch.nonzero(placed, as_tuple=False).flatten()
    if (last[rows] < 0).any():
        raise ValueError("the last sub-trajectory of an episode has no action token to carry its reward")
    token_rewards[rows, last[rows]] = rewards[rows].to(token_rewards.dtype)
    return token_rewards


def successor_rows(episode_ids: torch.Tensor, sub_index: torch.Tensor) -> torch.Tensor:
    """For each row, the row holding the same episode's next sub-trajectory (``sub_index + 1``), or -1."""
    keys = {
        (int(e), int(s)): row
        for row, (e, s) in enumerate(zip(episode_ids.tolist(), sub_index.tolist(), strict=True))
    }
    if len(keys) != len(episode_ids):
        raise ValueError("two rows share the same (episode_id, sub_index)")
    nxt = [
        keys.get((int(e), int(s) + 1), -1)
        for e, s in zip(episode_ids.tolist(), sub_index.tolist(), strict=True)
    ]
    return torch.tensor(nxt, dtype=torch.long, device=episode_ids.device)
