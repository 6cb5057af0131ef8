"""Generalised advantage estimation over action tokens, chained across an episode's sub-trajectories.

Tokens with mask 0 are *transparent*: the recursion steps from one action token straight to the next
action token of the same row (one step of ``gamma``/``lam`` per action token, none per tool-output
token), and rewards placed on mask-0 tokens are ignored. ``values[b, t]`` is the critic's estimate
of the state in which token ``t`` is produced (the prefix ``tokens[b, :t]``; ``trainer.models.Critic``).

The advantage trace of an episode runs across its sub-trajectories (:func:`compute_chained_gae`):
compaction changes the context the policy and the critic read, not the credit. After the last action
token of sub-trajectory ``k`` the next value is the critic's value at the *first action token of
sub-trajectory k+1* (the compacted context in which the policy acts next) and the next advantage is
that token's, so an episode cut into rows gets exactly the advantages of the same episode left whole
(tested). Per-row bootstrapping (each row's trace starting from 0 and reaching the reward only
through the critic's value at the next row) is kept as ``chain_subtrajectories=False`` for
comparison: with an imperfect critic it stops the credit at every compaction.

Endings (``AdvantageConfig.bootstrap_truncated``): an episode that ends, whatever the reason, is
terminal by default. Its graded reward is the outcome reward and nothing follows it: bootstrapping a
limit ending (max turns, max tokens, timeout, context full) from the critic as well would count the
outcome twice (the return target would become ``R + V``). Opting in bootstraps a limit ending from
the critic's value of its final state (``final_values``) and the caller does not place the graded
reward (:func:`trainer.rows.place_episode_rewards` ``drop``): use it only for rewards that are
*not* an outcome of the whole episode. Episodes ended by an infrastructure error never reach an
estimator (the data loader marks them unusable).

Decoupled lambda (VC-PPO, VAPO): the critic's targets use ``critic_lam`` (1 by default: Monte-Carlo
returns, unbiased whatever the critic), the actor's advantages ``lam`` (1 by default, verl's: one
step of ``lam`` per action token makes the trace vanish within a few dozen tokens of a
thousands-token episode, so below 1 every early token's credit rests on the critic reading its
state right; ``bench credit`` measures both), or a per-episode length-adaptive ``1 - 1 / (alpha *
L)`` (VAPO; ``L`` = the episode's action tokens) with ``lam_length_alpha``.
"""

import torch

from trainer.rows import check_token_tensors, first_action_index, float_dtype, successor_rows


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
    check_token_tensors(action_mask, token_rewards, values)
    batch, _ = action_mask.shape
    dtype = float_dtype(token_rewards, values)
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
    """Per-row bootstrap values for :func:`compute_gae`: per-row bootstrapping, the comparison mode.

    Row k bootstraps from the critic's value at the first action token of row k+1; an episode's last
    row from 0, or from ``final_values`` where ``truncated`` (pass ``truncated`` only for the rows
    to bootstrap). Each row's trace then starts from 0: credit crosses a compaction only through the
    critic's value, which :func:`compute_chained_gae` does not depend on. A row that is not its
    episode's last must have its successor in the batch (an error otherwise).
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
    dtype = float_dtype(values)
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


def terminal_bootstrap_values(
    is_last: torch.Tensor,
    truncated: torch.Tensor,
    final_values: torch.Tensor | None,
    bootstrap_truncated: bool,
) -> torch.Tensor:
    """Value after each row's episode ends ``[B]`` (read on last rows only): 0, the terminal default;
    ``final_values`` on a limit ending when ``bootstrap_truncated`` (opt-in, see the module docstring)."""
    boot = torch.zeros(
        is_last.shape[0], dtype=torch.float64 if final_values is None else float_dtype(final_values)
    )
    if bootstrap_truncated:
        if final_values is None:
            raise ValueError("bootstrap_truncated needs final_values (the critic's value of the final state)")
        cut = is_last.bool() & truncated.bool()
        boot[cut] = final_values[cut].to(boot.dtype)
    return boot.to(is_last.device)


def length_adaptive_lambda(
    action_mask: torch.Tensor, episode_ids: torch.Tensor, alpha: float
) -> torch.Tensor:
    """VAPO's length-adaptive lambda per row ``[B]``: ``1 - 1 / (alpha * L)``, clamped to [0, 1].

    ``L`` is the number of action tokens of the row's episode in the batch: a longer episode keeps
    more of its trace (``(1 - 1/(alpha L))^L`` tends to ``exp(-1/alpha)`` whatever ``L``), so the
    bias-variance trade-off of the trace does not shift with the length of the episode.
    """
    _, episode_of_row = torch.unique(episode_ids, return_inverse=True)
    per_row = action_mask.bool().sum(dim=1).to(torch.float64)
    per_episode = torch.zeros(
        int(episode_of_row.max()) + 1 if episode_ids.numel() else 0, dtype=torch.float64
    )
    per_episode.index_add_(0, episode_of_row.cpu(), per_row.cpu())
    length = per_episode[episode_of_row.cpu()].clamp(min=1.0)
    return (1.0 - 1.0 / (alpha * length)).clamp(0.0, 1.0).to(action_mask.device)


@torch.no_grad()
def compute_chained_gae(
    token_rewards: torch.Tensor,
    values: torch.Tensor,
    action_mask: torch.Tensor,
    episode_ids: torch.Tensor,
    sub_index: torch.Tensor,
    is_last: torch.Tensor,
    gamma: float,
    lam: float | torch.Tensor,
    bootstrap_values: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE over each *episode's* action tokens in order, its rows (sub-trajectories) chained.

    The action tokens of an episode, row by row in ``sub_index`` order and left to right within a
    row, form one sequence ``t_1 .. t_n``; then ``delta_i = r_i + gamma * V_{i+1} - V_i`` and
    ``A_i = delta_i + gamma * lam_i * A_{i+1}``, exactly as :func:`compute_gae` on one uncompacted
    row holding those tokens. After ``t_n`` the next value is the bootstrap value of the episode's
    last row (``bootstrap_values[b]`` where ``is_last[b]``; 0 when None: terminal) and the next
    advantage 0. So the value after a row's last action token is the critic's value at the first
    action token of the next row, and the trace carries on through it.

    ``lam`` is a float or a per-row tensor ``[B]`` (e.g. :func:`length_adaptive_lambda`); token ``i``
    uses its row's. Every row that is not its episode's last needs its successor (``sub_index + 1``)
    in the batch, else the chain would silently stop: that is a ValueError. Returns
    ``(advantages, returns)``, ``returns = advantages + values``, both 0 off the mask.

    How: the action tokens are gathered episode by episode into a compact ``[E, K]`` view (K = most
    action tokens of an episode), the backward recursion runs over it vectorised across episodes,
    and the results are scattered back.
    """
    check_token_tensors(action_mask, token_rewards, values)
    batch, _ = action_mask.shape
    device = values.device
    dtype = float_dtype(token_rewards, values)
    mask = action_mask.bool()
    successor = successor_rows(episode_ids, sub_index)
    missing = (~is_last.bool()) & (successor < 0)
    if missing.any():
        rows = torch.nonzero(missing).flatten().tolist()
        raise ValueError(
            f"rows {rows} are not their episode's last sub-trajectory but the next one is missing"
        )
    if isinstance(lam, torch.Tensor):
        if lam.shape != (batch,):
            raise ValueError(f"a lambda tensor must be per row [B]={batch}, got {tuple(lam.shape)}")
        row_lam = lam.to(device=device, dtype=dtype)
    else:
        row_lam = torch.full((batch,), float(lam), dtype=dtype, device=device)
    boot_rows = (
        torch.zeros(batch, dtype=dtype, device=device)
        if bootstrap_values is None
        else bootstrap_values.to(device=device, dtype=dtype)
    )
    if boot_rows.shape != (batch,):
        raise ValueError(f"bootstrap_values must be [B]={batch}, got {tuple(boot_rows.shape)}")

    # Rows in episode order, then by sub_index; action tokens in that order (stable sorts keep the
    # left-to-right order of tokens within a row).
    _, episode_of_row = torch.unique(episode_ids.to(device), return_inverse=True)
    n_episodes = int(episode_of_row.max()) + 1 if batch else 0
    by_sub = torch.argsort(sub_index.to(device), stable=True)
    row_order = by_sub[torch.argsort(episode_of_row[by_sub], stable=True)]
    rank = torch.empty_like(row_order)
    rank[row_order] = torch.arange(batch, device=device)
    rows, cols = mask.nonzero(as_tuple=True)
    order = torch.argsort(rank[rows], stable=True)
    rows, cols = rows[order], cols[order]
    episode = episode_of_row[rows]
    counts = torch.bincount(episode, minlength=n_episodes)
    width = int(counts.max()) if n_episodes else 0
    position = torch.arange(rows.numel(), device=device) - (torch.cumsum(counts, 0) - counts)[episode]

    rewards_c = torch.zeros(n_episodes, width, dtype=dtype, device=device)
    values_c = torch.zeros_like(rewards_c)
    lam_c = torch.zeros_like(rewards_c)
    rewards_c[episode, position] = token_rewards.to(dtype)[rows, cols]
    values_c[episode, position] = values.to(dtype)[rows, cols]
    lam_c[episode, position] = row_lam[rows]
    episode_boot = torch.zeros(n_episodes, dtype=dtype, device=device)
    last_rows = torch.nonzero(is_last.bool().to(device)).flatten()
    episode_boot[episode_of_row[last_rows]] = boot_rows[last_rows]

    slot = torch.arange(width, device=device).unsqueeze(0)
    valid = slot < counts.unsqueeze(1)
    is_final = slot == (counts - 1).unsqueeze(1)
    next_values = torch.cat([values_c[:, 1:], torch.zeros_like(values_c[:, :1])], dim=1)
    next_values = torch.where(is_final, episode_boot.unsqueeze(1), next_values)
    deltas = torch.where(valid, rewards_c + gamma * next_values - values_c, torch.zeros_like(values_c))
    compact = torch.zeros_like(deltas)
    running = torch.zeros(n_episodes, dtype=dtype, device=device)
    for k in range(width - 1, -1, -1):
        running = deltas[:, k] + gamma * lam_c[:, k] * running
        compact[:, k] = running

    advantages = torch.zeros(action_mask.shape, dtype=dtype, device=device)
    advantages[rows, cols] = compact[episode, position]
    returns = (advantages + values.to(dtype)) * mask
    return advantages, returns
