"""Advantage estimators as small pure functions over ``[B, T]`` token tensors, registered by name.

A row is one sub-trajectory: the exact tokens the policy saw and produced, with ``action_mask`` 1 on
the tokens the policy generated and 0 on prompt, tool-output and padding tokens. An episode is one or
more rows (a new one starts at each compaction), identified by ``episode_ids`` and ordered by
``sub_index``. The episode's reward sits on the last action token of its last sub-trajectory
(:func:`place_episode_rewards`).

Conventions shared by every estimator here:

* Tokens with mask 0 are *transparent*: a recursion steps from one action token straight to the next
  action token of the same row (one step of ``gamma``/``lam`` per action token, none per tool-output
  token), and rewards placed on mask-0 tokens are ignored.
* Advantages and returns are 0 where the mask is 0.
* Nothing is normalised inside an estimator unless the algorithm defines it that way (GRPO's group
  normalisation, REINFORCE++'s batch whitening); :func:`trainer.masked.masked_whiten` is separate.
* ``values[b, t]`` is the critic's estimate of the state in which token ``t`` is produced (the
  prefix ``tokens[b, :t]``); see ``trainer.models.Critic``.

Sub-trajectory ``k`` of an episode bootstraps from the critic's value at the *first action token of
sub-trajectory k+1*: that is the value of the compacted context (summary + prompt) in which the
policy acts next, the true successor state of the last token of sub-trajectory ``k``. The last
sub-trajectory of a terminated episode bootstraps from 0; that of a truncated episode (cut off by
limits) from the critic's value of its final state (``final_values``), because the return did not
end there.
"""

from collections.abc import Callable
from dataclasses import dataclass

import torch

from trainer.masked import masked_whiten


@dataclass(frozen=True)
class AdvantageBatch:
    """Everything an estimator may need about a batch of sub-trajectories (rows).

    ``episode_ids``, ``group_ids`` (the task, for group baselines), ``sub_index``, ``is_last`` and
    ``truncated`` are ``[B]``; ``values`` is ``[B, T]`` and ``final_values`` ``[B]`` (critic value of
    the state after the row's last token), both only needed by critic-based estimators.
    ``student_logprobs`` / ``teacher_logprobs`` ``[B, T]`` (the sampling policy's and the routed
    teacher's logprob of each token) are read by on-policy distillation (``opd``) only.
    """

    token_rewards: torch.Tensor
    action_mask: torch.Tensor
    episode_ids: torch.Tensor
    group_ids: torch.Tensor
    sub_index: torch.Tensor
    is_last: torch.Tensor
    truncated: torch.Tensor
    values: torch.Tensor | None = None
    final_values: torch.Tensor | None = None
    student_logprobs: torch.Tensor | None = None
    teacher_logprobs: torch.Tensor | None = None


@dataclass(frozen=True)
class AdvantageConfig:
    """Hyper-parameters the estimators read; unused ones are ignored by each estimator."""

    gamma: float = 1.0
    lam: float = 0.95
    eps: float = 1e-6
    norm_by_std: bool = True
    reward_weight: float = 0.0


AdvantageFn = Callable[[AdvantageBatch, AdvantageConfig], tuple[torch.Tensor, torch.Tensor]]
ADVANTAGE_ESTIMATORS: dict[str, AdvantageFn] = {}
CRITIC_ESTIMATORS: set[str] = set()
ALGO_ESTIMATORS: dict[str, str] = {}  # --algo name -> estimator name


def register_advantage(
    name: str, needs_critic: bool = False, algo: str | None = None
) -> Callable[[AdvantageFn], AdvantageFn]:
    """Register an estimator under ``name``; ``--algo`` picks it by ``algo`` (default: ``name``).

    ``needs_critic`` says it reads values (the trainer then builds and trains a critic).
    """

    def decorate(fn: AdvantageFn) -> AdvantageFn:
        if name in ADVANTAGE_ESTIMATORS or (algo or name) in ALGO_ESTIMATORS:
            raise ValueError(f"advantage estimator {name!r} registered twice")
        ADVANTAGE_ESTIMATORS[name] = fn
        ALGO_ESTIMATORS[algo or name] = name
        if needs_critic:
            CRITIC_ESTIMATORS.add(name)
        return fn

    return decorate


def estimator_for_algo(algo: str) -> str:
    """The estimator name behind ``--algo``; a clear error listing the known algorithms otherwise."""
    try:
        return ALGO_ESTIMATORS[algo]
    except KeyError:
        known = ", ".join(sorted(ALGO_ESTIMATORS))
        raise ValueError(f"unknown algorithm {algo!r}; known: {known}") from None


def get_advantage_estimator(name: str) -> AdvantageFn:
    """The estimator registered as ``name``; a clear error listing the known ones otherwise."""
    try:
        return ADVANTAGE_ESTIMATORS[name]
    except KeyError:
        known = ", ".join(sorted(ADVANTAGE_ESTIMATORS))
        raise ValueError(f"unknown advantage estimator {name!r}; known: {known}") from None


# ----------------------------------------------------------------------------------------------
# Generalised advantage estimation over action tokens
# ----------------------------------------------------------------------------------------------


def _check_token_tensors(action_mask: torch.Tensor, *tensors: torch.Tensor) -> None:
    if action_mask.dim() != 2:
        raise ValueError(f"action_mask must be [B, T], got shape {tuple(action_mask.shape)}")
    for tensor in tensors:
        if tensor.shape != action_mask.shape:
            raise ValueError(
                f"shape {tuple(tensor.shape)} does not match action_mask {tuple(action_mask.shape)}"
            )


def _float_dtype(*tensors: torch.Tensor) -> torch.dtype:
    dtype = torch.float32
    for tensor in tensors:
        if tensor.is_floating_point():
            dtype = torch.promote_types(dtype, tensor.dtype)
    return dtype


@torch.no_grad()
def compute_gae(
    token_rewards: torch.Tensor,
    values: torch.Tensor,
    action_mask: torch.Tensor,
    gamma: float,
    lam: float,
    bootstrap_values: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE over the action tokens of each row; mask-0 tokens are skipped, not stepped through.

    For action token ``t`` whose next action token in the row is ``t'``:
    ``delta_t = r_t + gamma * V_t' - V_t`` and ``A_t = delta_t + gamma * lam * A_t'``. After the
    row's last action token the next value is ``bootstrap_values[b]`` (0 when None) and the next
    advantage 0. Returns ``(advantages, returns)`` with ``returns = advantages + values`` on action
    tokens; both are 0 where the mask is 0.

    How: gather each row's action tokens to the front (stable sort), run the backward recursion over
    that compact ``[B, K]`` view (K = most action tokens in a row, vectorised over rows), scatter back.
    """
    _check_token_tensors(action_mask, token_rewards, values)
    batch, _ = action_mask.shape
    dtype = _float_dtype(token_rewards, values)
    mask = action_mask.bool()
    if bootstrap_values is None:
        bootstrap = torch.zeros(batch, dtype=dtype, device=values.device)
    else:
        if bootstrap_values.shape != (batch,):
            raise ValueError(f"bootstrap_values must be [B]={batch}, got {tuple(bootstrap_values.shape)}")
        bootstrap = bootstrap_values.to(dtype)

    counts = mask.sum(dim=1)
    width = int(counts.max()) if batch else 0
    order = torch.sort((~mask).to(torch.int8), dim=1, stable=True).indices[:, :width]
    rewards = token_rewards.to(dtype).gather(1, order)
    vals = values.to(dtype).gather(1, order)
    position = torch.arange(width, device=mask.device).unsqueeze(0)
    valid = position < counts.unsqueeze(1)
    is_final = position == (counts - 1).unsqueeze(1)

    next_values = torch.cat([vals[:, 1:], torch.zeros_like(vals[:, :1])], dim=1)
    next_values = torch.where(is_final, bootstrap.unsqueeze(1), next_values)
    deltas = torch.where(valid, rewards + gamma * next_values - vals, torch.zeros_like(vals))

    compact = torch.zeros_like(deltas)
    running = torch.zeros(batch, dtype=dtype, device=deltas.device)
    for k in range(width - 1, -1, -1):
        running = deltas[:, k] + gamma * lam * running
        compact[:, k] = running

    advantages = torch.zeros(action_mask.shape, dtype=dtype, device=values.device)
    advantages.scatter_(1, order, compact)
    advantages = advantages * mask
    returns = (advantages + values.to(dtype)) * mask
    return advantages, returns


# ----------------------------------------------------------------------------------------------
# Sub-trajectories: rewards, successors, bootstrap values
# ----------------------------------------------------------------------------------------------


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
    action_mask: torch.Tensor, rewards: torch.Tensor, is_last: torch.Tensor
) -> torch.Tensor:
    """Token rewards ``[B, T]``: each episode's reward on the last action token of its last row.

    ``rewards[b]`` is row b's episode reward (read only where ``is_last[b]``).
    """
    token_rewards = torch.zeros(action_mask.shape, dtype=_float_dtype(rewards), device=action_mask.device)
    last = last_action_index(action_mask)
    rows = torch.nonzero(is_last.bool(), as_tuple=False).flatten()
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


@torch.no_grad()
def subtrajectory_bootstrap_values(
    values: torch.Tensor,
    action_mask: torch.Tensor,
    episode_ids: torch.Tensor,
    sub_index: torch.Tensor,
    is_last: torch.Tensor,
    truncated: torch.Tensor,
    final_values: torch.Tensor,
) -> torch.Tensor:
    """Per-row bootstrap value for :func:`compute_gae` (see the module docstring for the rule).

    A row that is not its episode's last must have its successor in the batch: bootstrapping from
    anything else would silently train on a wrong target, so that is an error.
    """
    successor = successor_rows(episode_ids, sub_index)
    first = first_action_index(action_mask)
    last = is_last.bool()
    missing = (~last) & (successor < 0)
    if missing.any():
        rows = torch.nonzero(missing).flatten().tolist()
        raise ValueError(
            f"rows {rows} are not their episode's last sub-trajectory but the next one is missing"
        )
    dtype = _float_dtype(values)
    boot = torch.zeros(values.shape[0], dtype=dtype, device=values.device)
    has_next = successor >= 0
    if has_next.any():
        nxt = successor[has_next]
        if (first[nxt] < 0).any():
            raise ValueError("a successor sub-trajectory has no action token to bootstrap from")
        boot[has_next] = values[nxt, first[nxt]].to(dtype)
    ends_truncated = last & truncated.bool()
    boot[ends_truncated] = final_values[ends_truncated].to(dtype)
    return boot


@register_advantage("gae", needs_critic=True, algo="ppo")
def gae_estimator(batch: AdvantageBatch, config: AdvantageConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO with a learned critic: token-level GAE, sub-trajectories chained by bootstrap values."""
    if batch.values is None or batch.final_values is None:
        raise ValueError("the gae estimator needs critic values and final_values")
    bootstrap = subtrajectory_bootstrap_values(
        batch.values,
        batch.action_mask,
        batch.episode_ids,
        batch.sub_index,
        batch.is_last,
        batch.truncated,
        batch.final_values,
    )
    return compute_gae(
        batch.token_rewards, batch.values, batch.action_mask, config.gamma, config.lam, bootstrap
    )


# ----------------------------------------------------------------------------------------------
# Critic-free estimators: one scalar per episode, broadcast to all its action tokens
# ----------------------------------------------------------------------------------------------


def _episode_scores(
    token_rewards: torch.Tensor, action_mask: torch.Tensor, episode_ids: torch.Tensor, group_ids: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(episode_of_row, episode_reward, episode_group)``: rows folded into dense episode ids."""
    _check_token_tensors(action_mask, token_rewards)
    dtype = _float_dtype(token_rewards)
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


@torch.no_grad()
def compute_grpo_advantages(
    token_rewards: torch.Tensor,
    action_mask: torch.Tensor,
    episode_ids: torch.Tensor,
    group_ids: torch.Tensor,
    eps: float = 1e-6,
    norm_by_std: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO: ``(R - mean_group) / (std_group + eps)`` per episode, on every action token of its rows.

    The episode reward is the sum of its rows' action-token rewards; statistics are over episodes of
    the same group (task), each episode counted once however many sub-trajectories it has. ``std``
    is Bessel-corrected; a group of one episode has mean 0 and std 1 (its advantage is its reward),
    as in verl. Returns equal advantages (there is no critic).
    """
    episode_of_row, reward, group = _episode_scores(token_rewards, action_mask, episode_ids, group_ids)
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
    token_rewards: torch.Tensor, action_mask: torch.Tensor, episode_ids: torch.Tensor, group_ids: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """RLOO: ``R_i - mean_{j != i} R_j`` over the episodes of the group; a lone episode keeps ``R_i``."""
    episode_of_row, reward, group = _episode_scores(token_rewards, action_mask, episode_ids, group_ids)
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
    _check_token_tensors(action_mask, token_rewards)
    batch = action_mask.shape[0]
    zeros = torch.zeros(action_mask.shape, dtype=_float_dtype(token_rewards), device=action_mask.device)
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


@register_advantage("grpo")
def grpo_estimator(batch: AdvantageBatch, config: AdvantageConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO over episodes grouped by task."""
    return compute_grpo_advantages(
        batch.token_rewards,
        batch.action_mask,
        batch.episode_ids,
        batch.group_ids,
        config.eps,
        config.norm_by_std,
    )


@register_advantage("rloo")
def rloo_estimator(batch: AdvantageBatch, config: AdvantageConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """RLOO over episodes grouped by task."""
    return compute_rloo_advantages(batch.token_rewards, batch.action_mask, batch.episode_ids, batch.group_ids)


@register_advantage("reinforce_pp")
def reinforce_pp_estimator(
    batch: AdvantageBatch, config: AdvantageConfig
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++ with returns chained across each episode's sub-trajectories."""
    return compute_reinforce_pp_advantages(
        batch.token_rewards, batch.action_mask, config.gamma, batch.episode_ids, batch.sub_index
    )


# ----------------------------------------------------------------------------------------------
# On-policy distillation (reverse KL to a teacher, per token, no critic)
# ----------------------------------------------------------------------------------------------


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
    _check_token_tensors(action_mask, student_logprobs, teacher_logprobs)
    mask = action_mask.to(_float_dtype(student_logprobs, teacher_logprobs))
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


@register_advantage("opd")
def opd_estimator(batch: AdvantageBatch, config: AdvantageConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """Reverse-KL advantage to the routed teacher, plus ``reward_weight`` x the GRPO advantage of
    the task reward (0 = pure distillation)."""
    if batch.student_logprobs is None or batch.teacher_logprobs is None:
        raise ValueError("the opd estimator needs student_logprobs and teacher_logprobs")
    advantages, _ = compute_opd_advantages(batch.student_logprobs, batch.teacher_logprobs, batch.action_mask)
    if config.reward_weight:
        task, _ = grpo_estimator(batch, config)
        advantages = advantages + config.reward_weight * task.to(advantages.dtype)
    return advantages, advantages.clone()
