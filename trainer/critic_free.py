"""Critic-free advantages: a group or batch baseline per episode, and on-policy distillation per token.

GRPO, RLOO and REINFORCE++ score an episode by its reward (summed over its rows' action tokens) and
give every action token of the episode the same advantage: GRPO and RLOO against the other episodes
of the same task (its group), REINFORCE++ against the batch (whitened discounted returns). On-policy
distillation needs no reward at all: each token's advantage is the teacher's logprob minus the
student's, a one-step estimate of the reverse KL it descends.
"""

import torch

from trainer.gae import compute_gae
from trainer.masked import masked_whiten
from trainer.rows import check_token_tensors, first_action_index, float_dtype, successor_rows


def _episode_scores(
    token_rewards: torch.Tensor, action_mask: torch.Tensor, episode_ids: torch.Tensor, group_ids: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(episode_of_row, episode_reward, episode_group)``: rows folded into dense episode ids."""
    check_token_tensors(action_mask, token_rewards)
    dtype = float_dtype(token_rewards)
    _, episode_of_row = torch.unique(episode_ids, return_inverse=True)
    n_episodes = int(episode_of_row.max()) + 1 if episode_ids.numel() else 0
    row_reward = (token_rewards.to(dtype) * action_mask).sum(dim=1)
    episode_reward = torch.zeros(n_episodes, dtype=dtype, device=token_rewards.device)
    episode_reward.index_add_(0, episode_of_row, row_reward)
    episode_group = torch.full((n_episodes,), -1, dtype=torch.long, device=token_rewards.device)
    episode_group[episode_of_row] = group_ids.long()
    if (episode_group[episode_of_row] != group_ids.long()).any():
        raise ValueError("rows of one episode carry different group ids")
    return episode_of_row, episode_reward, episode_group


def _broadcast_to_tokens(
    episode_advantage: torch.Tensor, episode_of_row: torch.Tensor, action_mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    advantages = episode_advantage[episode_of_row].unsqueeze(1) * action_mask
    return advantages, advantages.clone()


def _refuse_small_groups(group: torch.Tensor, min_group_size: int, algorithm: str) -> None:
    """A group baseline needs several episodes of the same task: a lone episode has none (its
    "advantage" would be its raw reward, never negative for 0/1 rewards), so refuse it clearly."""
    if min_group_size <= 1 or group.numel() == 0:
        return
    ids, sizes = torch.unique(group, return_counts=True)
    small = ids[sizes < min_group_size]
    if small.numel():
        shown = ", ".join(
            f"{int(g)} ({int(n)})" for g, n in zip(small[:8], sizes[sizes < min_group_size][:8], strict=True)
        )
        raise ValueError(
            f"{algorithm} needs at least {min_group_size} episodes of each task in a step; "
            f"group (episodes): {shown}{' ...' if small.numel() > 8 else ''}. Schedule a task's whole "
            "group together (rollout.groups), or use --algo ppo, whose critic needs no group"
        )


@torch.no_grad()
def compute_grpo_advantages(
    token_rewards: torch.Tensor,
    action_mask: torch.Tensor,
    episode_ids: torch.Tensor,
    group_ids: torch.Tensor,
    eps: float = 1e-6,
    norm_by_std: bool = True,
    min_group_size: int = 2,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO: ``(R - mean_group) / (std_group + eps)`` per episode, on every action token of its rows.

    The episode reward is the sum of its rows' action-token rewards; statistics are over episodes of
    the same group (task), each episode counted once however many sub-trajectories it has. ``std``
    is Bessel-corrected. ``norm_by_std=False`` is Dr.GRPO's ``R - mean_group`` (no division: the
    std rescales easy and hard tasks differently, a bias Dr.GRPO removes). Groups smaller than
    ``min_group_size`` are refused with a ValueError. Returns equal advantages (there is no critic).
    """
    episode_of_row, reward, group = _episode_scores(token_rewards, action_mask, episode_ids, group_ids)
    _refuse_small_groups(group, min_group_size, "GRPO")
    advantage = torch.zeros_like(reward)
    for g in torch.unique(group):
        members = group == g
        scores = reward[members]
        if scores.numel() == 1:
            mean, std = torch.zeros_like(scores[0]), torch.ones_like(scores[0])
        else:
            mean, std = scores.mean(), scores.std()
        centred = scores - mean
        advantage[members] = centred / (std + eps) if norm_by_std else centred
    return _broadcast_to_tokens(advantage, episode_of_row, action_mask)


@torch.no_grad()
def compute_rloo_advantages(
    token_rewards: torch.Tensor,
    action_mask: torch.Tensor,
    episode_ids: torch.Tensor,
    group_ids: torch.Tensor,
    min_group_size: int = 2,
) -> tuple[torch.Tensor, torch.Tensor]:
    """RLOO: ``R_i - mean_{j != i} R_j`` over the episodes of the group; groups smaller than
    ``min_group_size`` are refused (with ``min_group_size=1`` a lone episode keeps ``R_i``)."""
    episode_of_row, reward, group = _episode_scores(token_rewards, action_mask, episode_ids, group_ids)
    _refuse_small_groups(group, min_group_size, "RLOO")
    advantage = reward.clone()
    for g in torch.unique(group):
        members = group == g
        scores = reward[members]
        n = scores.numel()
        if n > 1:
            advantage[members] = scores - (scores.sum() - scores) / (n - 1)
    return _broadcast_to_tokens(advantage, episode_of_row, action_mask)


@torch.no_grad()
def compute_reinforce_pp_advantages(
    token_rewards: torch.Tensor,
    action_mask: torch.Tensor,
    gamma: float,
    episode_ids: torch.Tensor | None = None,
    sub_index: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++: discounted return-to-go per action token, whitened over the batch's action tokens.

    The return runs across an episode's sub-trajectories (row k continues into row k+1's first action
    token), so earlier sub-trajectories see the final reward. Without ``episode_ids`` each row is its
    own episode. Returns ``(whitened advantages, raw returns)``.
    """
    check_token_tensors(action_mask, token_rewards)
    batch = action_mask.shape[0]
    zeros = torch.zeros(action_mask.shape, dtype=float_dtype(token_rewards), device=action_mask.device)
    if episode_ids is None or sub_index is None:
        returns, _ = compute_gae(token_rewards, zeros, action_mask, gamma, 1.0)
    else:
        successor = successor_rows(episode_ids, sub_index)
        first = first_action_index(action_mask)
        returns = zeros.clone()
        bootstrap = torch.zeros(batch, dtype=zeros.dtype, device=zeros.device)
        # Later sub-trajectories first, so each row's successor already holds its returns.
        for level in torch.unique(sub_index).flip(0).tolist():
            rows = torch.nonzero(sub_index == level).flatten()
            for row in rows.tolist():
                nxt = int(successor[row])
                if nxt >= 0 and first[nxt] >= 0:
                    bootstrap[row] = returns[nxt, first[nxt]]
            level_returns, _ = compute_gae(
                token_rewards[rows], zeros[rows], action_mask[rows], gamma, 1.0, bootstrap[rows]
            )
            returns[rows] = level_returns
    advantages = masked_whiten(returns, action_mask.to(returns.dtype))
    return advantages, returns


@torch.no_grad()
def compute_opd_advantages(
    student_logprobs: torch.Tensor, teacher_logprobs: torch.Tensor, action_mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """On-policy distillation: ``A_t = log pi_teacher(a_t | s_t) - log pi_student(a_t | s_t)``.

    The student sampled ``a_t``; ``-A_t`` is the single-sample estimate of the per-token reverse KL
    ``KL(pi_student || pi_teacher)`` at ``s_t``, so the policy-gradient step with this advantage
    descends the reverse KL (mode-seeking: the student is pushed off tokens the teacher would not
    write, towards the teacher's own choices). No discounting across tokens and no critic: each token
    is its own one-step return (the dense teacher signal needs no credit assignment). 0 off the mask.
    """
    check_token_tensors(action_mask, student_logprobs, teacher_logprobs)
    mask = action_mask.to(float_dtype(student_logprobs, teacher_logprobs))
    advantages = (teacher_logprobs - student_logprobs) * mask
    return advantages, advantages.clone()


def reverse_kl(
    student_logprobs: torch.Tensor, teacher_logprobs: torch.Tensor, action_mask: torch.Tensor
) -> float:
    """Mean over action tokens of ``log pi_student - log pi_teacher`` on the student's own samples:
    the Monte-Carlo estimate of the per-token reverse KL that distillation minimises."""
    mask = action_mask.to(student_logprobs.dtype)
    total = mask.sum()
    return float(((student_logprobs - teacher_logprobs) * mask).sum() / total) if total > 0 else 0.0
