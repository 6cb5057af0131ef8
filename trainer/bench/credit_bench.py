"""``rlguard bench credit``: does credit reach a first-turn decision across compactions?

Why: the trainer's advantage trace runs across an episode's sub-trajectories, its critic learns
Monte-Carlo returns (``critic_lam = 1``) after a warm-up, and limit endings are terminal; before
that, each sub-trajectory's trace started from 0 and reached the reward only through the critic's
value at the next one, the critic regressed to lambda-0.95 targets from a zero start, and long
episodes stopped learning quietly. ``bench learn`` does not show it (10-15 action tokens per
episode). This benchmark trains the same tiny GRU policy on ``trainer.bench.credit_env`` (reward set
by the first action token, 10 turns x 64 action tokens, compaction every 2-3 turns, so the credit
crosses >= 3 boundaries) three ways, with the same budget of episodes:

* ``ppo``: the trainer's defaults (chained GAE, lambda 1 for actor and critic, critic warm-up);
* ``ppo_lam095``: the same with the actor's lambda at 0.95 (VC-PPO's decoupled setting);
* ``ppo_per_row``: the previous trainer (per-row bootstrapping, lambda 0.95 for both, no warm-up);
* ``grpo``: the trainer's ``grpo`` estimator, groups of ``group_size`` episodes per task.

and reports the final success of each (sampled policy, fresh tasks), ``first_turn_adv_snr`` (the
advantage at the choice token: mean when the choice was right minus mean when wrong, over their
pooled standard deviation, averaged over the run; ~0 means the choice gets no signal) and
``gae_vs_mc_error`` (largest difference between the chained GAE's returns at lambda 1 and the
Monte-Carlo returns, and between its advantages and ``G - V``, with an exact critic ``V(s) =
E[R | history]``; it is 0 up to float64 rounding).
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import nn

from trainer.advantages import ALGORITHMS, AdvantageConfig
from trainer.bench.credit_env import CreditConfig, CreditRollout, legal_actions, play, sample_credit_tasks
from trainer.bench.learn_bench import GRUNet, advantage_batch, critic_values
from trainer.errors import TrainerError
from trainer.gae import compute_chained_gae
from trainer.losses import compute_entropy_bonus, compute_policy_loss, compute_value_loss
from trainer.masked import masked_whiten
from trainer.rows import place_episode_rewards

NEG_INF = -1e9
VARIANTS = ("ppo", "grpo", "ppo_per_row", "ppo_lam095")


@dataclass(frozen=True)
class CreditParams:
    """One setting for every variant; ``warmup_iterations``, lambdas and value terms only matter to PPO."""

    iterations: int = 30
    tasks_per_iter: int = 16
    group_size: int = 4
    lr: float = 3e-3
    epochs: int = 2
    minibatches: int = 4
    clip: float = 0.2
    entropy_coef: float = 0.0
    vf_coef: float = 0.5
    value_clip: float = 0.2
    lam: float = 1.0
    critic_lam: float = 1.0
    previous_lam: float = 0.95  # the previous trainer's lambda (ppo_per_row) and ppo_lam095's actor lambda
    warmup_iterations: int = 3
    max_grad_norm: float = 1.0
    embed: int = 32
    hidden: int = 64
    eval_episodes: int = 512


def score(
    actor: GRUNet, ro: CreditRollout, rows: torch.Tensor, config: CreditConfig
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(logprobs [r, T], legal logits [r, T, V])`` of the chosen rows' tokens under ``actor``."""
    tokens = ro.rollout.tokens[rows]
    out = actor(tokens)
    logits = torch.cat([torch.zeros_like(out[:, :1]), out[:, :-1]], dim=1)
    logits = logits.masked_fill(~legal_actions(ro.is_choice[rows], config), NEG_INF)
    logprobs = torch.log_softmax(logits, dim=-1).gather(2, tokens.unsqueeze(2)).squeeze(2)
    return logprobs, logits


def advantage_config(variant: str, p: CreditParams) -> AdvantageConfig:
    if variant == "ppo_per_row":
        return AdvantageConfig(lam=p.previous_lam, critic_lam=p.previous_lam, chain_subtrajectories=False)
    if variant == "ppo_lam095":
        return AdvantageConfig(lam=p.previous_lam, critic_lam=p.critic_lam)
    return AdvantageConfig(lam=p.lam, critic_lam=p.critic_lam)


def choice_snr(advantages: torch.Tensor, ro: CreditRollout) -> float:
    """(mean advantage at right choices - at wrong ones) / their pooled std; 0 when a side is empty."""
    at_choice = advantages[ro.is_choice]
    right = ro.right[ro.rollout.episode_ids[ro.is_choice.any(dim=1)]]
    good, bad = at_choice[right], at_choice[~right]
    if len(good) < 2 or len(bad) < 2:
        return 0.0
    pooled = math.sqrt(
        (good.var().item() * (len(good) - 1) + bad.var().item() * (len(bad) - 1)) / (len(at_choice) - 2)
    )
    return (good.mean().item() - bad.mean().item()) / max(pooled, 1e-8)


def exact_critic_error(ro: CreditRollout) -> float:
    """Chained GAE at lambda 1 with the exact critic ``V(s_t) = E[R | history]`` (``p_right`` up to
    and including the choice's state, the reward after it) against Monte-Carlo: the largest of
    ``|returns - G|`` and ``|advantages - (G - V)|`` over every action token, in float64."""
    r = ro.rollout
    mask = r.action_mask.double()
    episode_reward = r.rewards.double()[r.episode_ids]
    after_choice = torch.ones_like(mask, dtype=torch.bool)
    first = ro.is_choice.float().argmax(dim=1)
    positions = torch.arange(mask.shape[1]).unsqueeze(0)
    on_first_row = r.sub_index == 0
    after_choice[on_first_row] = positions.expand_as(mask)[on_first_row] > first[on_first_row].unsqueeze(1)
    values = torch.where(
        after_choice, episode_reward.unsqueeze(1), ro.p_right.double()[r.episode_ids].unsqueeze(1)
    )
    values = values * mask
    rewards = place_episode_rewards(r.action_mask, r.row_rewards.double(), r.is_last)
    advantages, returns = compute_chained_gae(
        rewards, values, r.action_mask, r.episode_ids, r.sub_index, r.is_last, 1.0, 1.0
    )
    monte_carlo = episode_reward.unsqueeze(1) * mask  # gamma 1, one reward at the end: G_t = R
    return max(
        float(((returns - monte_carlo) * mask).abs().max()),
        float(((advantages - (monte_carlo - values)) * mask).abs().max()),
    )


@dataclass
class VariantResult:
    variant: str
    seed: int
    final_success: float
    first_turn_adv_snr: float
    curve: list[float]
    seconds: float
    episodes: int


@torch.no_grad()
def evaluate(actor: GRUNet, config: CreditConfig, episodes: int, seed: int) -> float:
    generator = torch.Generator().manual_seed(seed)
    tasks = sample_credit_tasks(config, episodes, generator)
    return float(play(actor, tasks, config, generator).rollout.rewards.mean())


def train_variant(
    variant: str, seed: int = 0, params: CreditParams | None = None, config: CreditConfig | None = None
) -> VariantResult:
    """Train a fresh actor (and critic, for the PPO variants) for ``params.iterations`` rollouts."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; use one of {', '.join(VARIANTS)}")
    p, config = params or CreditParams(), config or CreditConfig()
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    actor = GRUNet(config.vocab_size, config.vocab_size, p.embed, p.hidden)
    uses_critic = variant != "grpo"
    critic = GRUNet(config.vocab_size, 1, p.embed, p.hidden) if uses_critic else None
    actor_opt = torch.optim.Adam(actor.parameters(), lr=p.lr)
    critic_opt = torch.optim.Adam(critic.parameters(), lr=p.lr) if critic else None
    estimator = ALGORITHMS.get("grpo" if variant == "grpo" else "ppo").estimate
    adv_config = advantage_config(variant, p)
    warmup = p.warmup_iterations if variant in ("ppo", "ppo_lam095") else 0
    started = time.perf_counter()
    curve, snrs = [], []
    for iteration in range(p.iterations):
        tasks = sample_credit_tasks(config, p.tasks_per_iter, generator).repeat(p.group_size)
        groups = torch.arange(p.tasks_per_iter).repeat_interleave(p.group_size)
        ro = play(actor, tasks, config, generator, group_ids=groups)
        r = ro.rollout
        mask = r.action_mask
        with torch.no_grad():
            old_values = critic_values(critic, r.tokens) * mask if critic else None
            advantages, returns = estimator(advantage_batch(r, old_values), adv_config)
            if uses_critic:
                advantages = masked_whiten(advantages, mask)
        curve.append(float(r.rewards.mean()))
        snrs.append(choice_snr(advantages, ro))
        train_actor = iteration >= warmup
        rows = r.tokens.shape[0]
        for _ in range(p.epochs):
            for chunk in torch.randperm(rows, generator=generator).chunk(p.minibatches):
                if critic is not None:
                    values = critic_values(critic, r.tokens[chunk])
                    value = compute_value_loss(
                        values, old_values[chunk], returns[chunk], mask[chunk], p.value_clip
                    )
                    critic_opt.zero_grad()
                    (p.vf_coef * value.loss).backward()
                    nn.utils.clip_grad_norm_(critic.parameters(), p.max_grad_norm)
                    critic_opt.step()
                if train_actor:
                    logprobs, logits = score(actor, ro, chunk, config)
                    policy = compute_policy_loss(
                        logprobs, r.logprobs[chunk], advantages[chunk], mask[chunk], p.clip, p.clip, 3.0
                    )
                    loss = policy.loss - p.entropy_coef * compute_entropy_bonus(logits, mask[chunk])
                    actor_opt.zero_grad()
                    loss.backward()
                    nn.utils.clip_grad_norm_(actor.parameters(), p.max_grad_norm)
                    actor_opt.step()
    final = evaluate(actor, config, p.eval_episodes, seed + 10_000)
    return VariantResult(
        variant,
        seed,
        final,
        sum(snrs) / len(snrs) if snrs else 0.0,
        curve,
        time.perf_counter() - started,
        p.iterations * p.tasks_per_iter * p.group_size,
    )


def _run(job: tuple[str, int, CreditParams, CreditConfig]) -> VariantResult:
    torch.set_num_threads(1)
    return train_variant(*job)


def run_credit_bench(
    seed: int = 0,
    params: CreditParams | None = None,
    workers: int = 2,
    out_dir: Path | None = None,
    config: CreditConfig | None = None,
) -> dict:
    """Every variant with the same budget (in ``workers`` single-thread processes), the exact-critic
    check, and the numbers ``rlguard bench credit`` prints; the learning curves go to
    ``out_dir/results.json`` when given."""
    p = params or CreditParams()
    if p.iterations < 1 or workers < 1:
        raise TrainerError("iterations and workers must be at least 1")
    started = time.perf_counter()
    load = os.getloadavg()[0]
    config = config or CreditConfig()
    jobs = [(variant, seed, p, config) for variant in VARIANTS]
    if workers > 1:
        with ProcessPoolExecutor(
            max_workers=workers, mp_context=multiprocessing.get_context("spawn")
        ) as pool:
            results = list(pool.map(_run, jobs))
    else:
        results = [_run(job) for job in jobs]
    by_name = {r.variant: r for r in results}
    generator = torch.Generator().manual_seed(seed + 1)
    probe_policy = GRUNet(config.vocab_size, config.vocab_size, p.embed, p.hidden)
    probe = play(probe_policy, sample_credit_tasks(config, 64, generator), config, generator)
    summary: dict = {
        "ppo_success": by_name["ppo"].final_success,
        "grpo_success": by_name["grpo"].final_success,
        "ppo_per_row_success": by_name["ppo_per_row"].final_success,
        "ppo_lam095_success": by_name["ppo_lam095"].final_success,
        "chance": 1 / config.num_choices,
        "first_turn_adv_snr": by_name["ppo"].first_turn_adv_snr,
        "first_turn_adv_snr_per_row": by_name["ppo_per_row"].first_turn_adv_snr,
        "first_turn_adv_snr_lam095": by_name["ppo_lam095"].first_turn_adv_snr,
        "first_turn_adv_snr_grpo": by_name["grpo"].first_turn_adv_snr,
        "gae_vs_mc_error": exact_critic_error(probe),
        "steps": p.iterations,
        "episodes_per_step": p.tasks_per_iter * p.group_size,
        "turns": config.turns,
        "action_tokens_per_episode": config.turns * config.action_len,
        "min_compactions": config.min_boundaries,
        "mean_compactions": round(float(probe.rollout.num_subs.float().mean()) - 1, 2),
        "seconds": round(time.perf_counter() - started, 1),
        "load_avg_1m": round(load, 2),
        "load_avg_1m_end": round(os.getloadavg()[0], 2),
    }
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        curves = {r.variant: [round(x, 3) for x in r.curve] for r in results}
        detail = {**summary, "params": asdict(p), "curves": curves}
        (out_dir / "results.json").write_text(json.dumps(detail, indent=2) + "\n")
    return summary
