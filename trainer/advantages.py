"""Advantage estimators, registered by the ``--algo`` name that trains with them (``ALGORITHMS``).

An estimator maps an :class:`AdvantageBatch` (a step's sub-trajectory rows, ``[B, T]`` token
tensors; ``trainer.rows``) and an :class:`AdvantageConfig` to ``(advantages, returns)``. The
recursions live beside it: GAE chained across sub-trajectories in ``trainer.gae``, group and batch
baselines and on-policy distillation in ``trainer.critic_free``. ``trainer.settings`` validates
``algo`` against :data:`ALGORITHMS`, so a new estimator registered here is a new ``--algo``.

Conventions shared by every estimator:

* Tokens with mask 0 are *transparent* (no step of ``gamma``/``lam``, rewards on them ignored) and
  advantages and returns are 0 there.
* Nothing is normalised inside an estimator unless the algorithm defines it that way (GRPO's group
  normalisation, REINFORCE++'s batch whitening); :func:`trainer.masked.masked_whiten` is separate.
* ``values[b, t]`` is the critic's estimate of the state in which token ``t`` is produced (the
  prefix ``tokens[b, :t]``); see ``trainer.models.Critic``.
* An episode's reward sits on the last action token of its last sub-trajectory
  (:func:`trainer.rows.place_episode_rewards`); endings are terminal unless ``bootstrap_truncated``
  (``trainer.gae``).
"""

from collections.abc import Callable
from dataclasses import dataclass

import torch

from contract.registry import Registry
from trainer.critic_free import (
    compute_grpo_advantages,
    compute_opd_advantages,
    compute_reinforce_pp_advantages,
    compute_rloo_advantages,
)
from trainer.gae import (
    compute_chained_gae,
    compute_gae,
    length_adaptive_lambda,
    subtrajectory_bootstrap_values,
    terminal_bootstrap_values,
)


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
    """Hyper-parameters the estimators read; unused ones are ignored by each estimator.

    ``lam`` is the actor's lambda and ``critic_lam`` the critic's (the returns the value loss
    regresses to); ``lam_length_alpha`` (VAPO's alpha, e.g. 0.05) replaces ``lam`` with
    ``1 - 1 / (alpha * L)`` per episode of ``L`` action tokens. ``chain_subtrajectories`` runs the
    advantage trace across an episode's rows (False: per-row bootstrapping, for comparison only).
    ``bootstrap_truncated`` bootstraps limit endings from ``final_values`` (see ``trainer.gae``:
    the caller then drops their graded reward). ``min_group_size`` is the smallest group a
    group-baseline estimator (GRPO, RLOO) accepts.
    """

    gamma: float = 1.0
    lam: float = 1.0
    eps: float = 1e-6
    norm_by_std: bool = True
    reward_weight: float = 0.0
    critic_lam: float = 1.0
    lam_length_alpha: float | None = None
    chain_subtrajectories: bool = True
    bootstrap_truncated: bool = False
    min_group_size: int = 2

    def __post_init__(self) -> None:
        for name in ("gamma", "lam", "critic_lam"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        if self.lam_length_alpha is not None and self.lam_length_alpha <= 0:
            raise ValueError(f"lam_length_alpha must be positive, got {self.lam_length_alpha}")
        if self.min_group_size < 1:
            raise ValueError(f"min_group_size must be at least 1, got {self.min_group_size}")


AdvantageFn = Callable[[AdvantageBatch, AdvantageConfig], tuple[torch.Tensor, torch.Tensor]]


@dataclass(frozen=True)
class Algorithm:
    """What ``--algo NAME`` trains with: its advantage estimator, and whether that reads a critic
    (the trainer then builds and trains one)."""

    estimate: AdvantageFn
    needs_critic: bool = False


ALGORITHMS: Registry[Algorithm] = Registry("algorithm")


def register_algorithm(name: str, *, needs_critic: bool = False) -> Callable[[AdvantageFn], AdvantageFn]:
    """Register an estimator as the algorithm ``name`` (what ``--algo`` and ``trainer.algo`` name)."""

    def decorate(estimate: AdvantageFn) -> AdvantageFn:
        ALGORITHMS.add(name, Algorithm(estimate, needs_critic))
        return estimate

    return decorate


def _actor_lambda(batch: AdvantageBatch, config: AdvantageConfig) -> float | torch.Tensor:
    if config.lam_length_alpha is None:
        return config.lam
    return length_adaptive_lambda(batch.action_mask, batch.episode_ids, config.lam_length_alpha)


@register_algorithm("ppo", needs_critic=True)
def gae_estimator(batch: AdvantageBatch, config: AdvantageConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO with a learned critic: token-level GAE chained across each episode's sub-trajectories.

    Advantages use the actor's lambda (``lam``, or length-adaptive), returns (the critic's targets)
    ``critic_lam``; episodes end terminal unless ``bootstrap_truncated`` (``trainer.gae``).
    """
    if batch.values is None:
        raise ValueError("the gae estimator needs critic values")
    boot = terminal_bootstrap_values(
        batch.is_last, batch.truncated, batch.final_values, config.bootstrap_truncated
    )
    actor_lam = _actor_lambda(batch, config)
    if not config.chain_subtrajectories:
        if batch.final_values is None:
            raise ValueError("per-row bootstrapping needs final_values")
        per_row = subtrajectory_bootstrap_values(
            batch.values,
            batch.action_mask,
            batch.episode_ids,
            batch.sub_index,
            batch.is_last,
            batch.truncated & config.bootstrap_truncated,
            batch.final_values,
        )
        lam_row = actor_lam if isinstance(actor_lam, float) else None
        if lam_row is None:
            raise ValueError("length-adaptive lambda needs chain_subtrajectories")
        advantages, _ = compute_gae(
            batch.token_rewards, batch.values, batch.action_mask, config.gamma, lam_row, per_row
        )
        _, returns = compute_gae(
            batch.token_rewards, batch.values, batch.action_mask, config.gamma, config.critic_lam, per_row
        )
        return advantages, returns

    def chained(lam: float | torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return compute_chained_gae(
            batch.token_rewards,
            batch.values,
            batch.action_mask,
            batch.episode_ids,
            batch.sub_index,
            batch.is_last,
            config.gamma,
            lam,
            boot,
        )

    advantages, returns = chained(actor_lam)
    if not (isinstance(actor_lam, float) and actor_lam == config.critic_lam):
        _, returns = chained(config.critic_lam)
    return advantages, returns


@register_algorithm("grpo")
def grpo_estimator(batch: AdvantageBatch, config: AdvantageConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO over episodes grouped by task."""
    return compute_grpo_advantages(
        batch.token_rewards,
        batch.action_mask,
        batch.episode_ids,
        batch.group_ids,
        config.eps,
        config.norm_by_std,
        config.min_group_size,
    )


@register_algorithm("rloo")
def rloo_estimator(batch: AdvantageBatch, config: AdvantageConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """RLOO over episodes grouped by task."""
    return compute_rloo_advantages(
        batch.token_rewards, batch.action_mask, batch.episode_ids, batch.group_ids, config.min_group_size
    )


@register_algorithm("reinforce_pp")
def reinforce_pp_estimator(
    batch: AdvantageBatch, config: AdvantageConfig
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++ with returns chained across each episode's sub-trajectories."""
    return compute_reinforce_pp_advantages(
        batch.token_rewards, batch.action_mask, config.gamma, batch.episode_ids, batch.sub_index
    )


@register_algorithm("opd")
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
