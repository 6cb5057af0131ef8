"""The train-inference gap: measured every step, and optionally corrected (verl's ``rollout_corr``).

The engine that sampled a token (vLLM, SGLang, the built-in server; bf16 kernels, another batch
shape) and the trainer do not give it the same probability. PPO's ratio is therefore taken against
the trainer's own logprob of every token before the update (the *proximal* policy, AReaL's decoupled
PPO), never against the engine's: anchored to the engine, the first epoch's ratio would be
``pi_trainer / pi_engine`` and beyond ~±0.25 nats the clip would zero the gradient of one sign of the
advantage. What is left of the gap is the behaviour ratio ``rho_t = pi_prox(a_t) / pi_engine(a_t)``:

* :func:`mismatch_metrics` measures it (k1 and k3 estimates of ``KL(pi_engine || pi_prox)``, the
  log-perplexity difference, token and sequence chi-squared, and the fraction of tokens whose
  ``rho`` lies outside PPO's clip range: what an engine-anchored first epoch would have clipped);
* :func:`rollout_correction` turns it into importance weights (truncated, per token or per sequence)
  and a rejection mask (per token, per sequence or on the sequence's geometric mean), as verl's
  ``compute_rollout_correction_and_rejection_mask``.

A *sequence* here is an episode when ``episode_ids`` are given (the probability of an episode is the
product over all its rows' action tokens), else a row. Stale tokens (an older policy version
generated them) get the same treatment: their ``rho`` also holds the policy's change since.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch

from trainer.masked import masked_mean

SAFETY_BOUND = 20.0  # exp(±20): no overflow, as verl
ISLevel = Literal["token", "sequence"]
RSLevel = Literal["token", "sequence", "geometric"]


def _sequence_of_row(mask: torch.Tensor, episode_ids: torch.Tensor | None) -> tuple[torch.Tensor, int]:
    if episode_ids is None:
        return torch.arange(mask.shape[0], device=mask.device), mask.shape[0]
    _, inverse = torch.unique(episode_ids.to(mask.device), return_inverse=True)
    return inverse, int(inverse.max()) + 1 if inverse.numel() else 0


def sequence_log_ratio(
    log_ratio: torch.Tensor, mask: torch.Tensor, episode_ids: torch.Tensor | None = None, mean: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per sequence: ``(sum (or mean) of log_ratio over its action tokens [S], sequence of each row [B])``."""
    sequence, count = _sequence_of_row(mask, episode_ids)
    m = mask.to(log_ratio.dtype)
    total = torch.zeros(count, dtype=log_ratio.dtype, device=log_ratio.device)
    total.index_add_(0, sequence, (log_ratio * m).sum(dim=1))
    if mean:
        tokens = torch.zeros_like(total)
        tokens.index_add_(0, sequence, m.sum(dim=1))
        total = total / tokens.clamp(min=1)
    return total, sequence


@torch.no_grad()
def mismatch_metrics(
    proximal_logprobs: torch.Tensor,
    rollout_logprobs: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    episode_ids: torch.Tensor | None = None,
) -> dict[str, float]:
    """The gap between the trainer's and the engine's logprobs of the sampled tokens (no NaN: an
    empty mask gives zeros). ``rho = pi_prox / pi_engine`` per action token.

    * ``kl``: ``mean(log pi_engine - log pi_prox)`` (k1 estimate of ``KL(pi_engine || pi_prox)``);
    * ``k3_kl``: ``mean(rho - log rho - 1)`` (k3: non-negative, low variance);
    * ``log_ppl_diff``: mean over sequences of (trainer log-perplexity - engine log-perplexity),
      ``log_ppl_abs_diff`` its absolute value;
    * ``chi2_token``: ``mean(rho^2) - 1``; ``chi2_seq``: ``mean over sequences of (prod rho)^2 - 1``
      (the variance of token- and sequence-level importance weights);
    * ``outside_clip_fraction``: share of tokens with ``rho`` outside ``[1 - clip_low, 1 + clip_high]``.
    """
    m = mask.to(torch.float64)
    tokens = float(m.sum())
    if tokens == 0:
        keys = ("kl", "k3_kl", "log_ppl_diff", "log_ppl_abs_diff", "chi2_token", "chi2_seq")
        return {k: 0.0 for k in (*keys, "outside_clip_fraction")}
    log_rho = (proximal_logprobs.double() - rollout_logprobs.double()) * m
    safe = log_rho.clamp(-SAFETY_BOUND, SAFETY_BOUND)
    rho = torch.exp(safe)
    mean_log_rho, _ = sequence_log_ratio(log_rho, m, episode_ids, mean=True)
    has_tokens = sequence_log_ratio(m, m, episode_ids)[0] > 0
    log_ppl_diff = -mean_log_rho[has_tokens]  # log ppl_trainer - log ppl_engine = -(mean log rho)
    sum_log_rho, _ = sequence_log_ratio(log_rho, m, episode_ids)
    outside = (rho < 1.0 - clip_low) | (rho > 1.0 + clip_high)
    return {
        "kl": float(masked_mean(-log_rho, m)),
        "k3_kl": float(masked_mean(rho - safe - 1.0, m)),
        "log_ppl_diff": float(log_ppl_diff.mean()),
        "log_ppl_abs_diff": float(log_ppl_diff.abs().mean()),
        "chi2_token": float(masked_mean(rho.square(), m) - 1.0),
        "chi2_seq": float(
            torch.exp(2.0 * sum_log_rho[has_tokens].clamp(-SAFETY_BOUND, SAFETY_BOUND)).mean() - 1.0
        ),
        "outside_clip_fraction": float(masked_mean(outside.to(m.dtype), m)),
    }


@dataclass(frozen=True)
class RolloutCorrection:
    """``weights [B, T]`` (detached; 1 where no IS is asked), ``keep [B, T]`` (the action mask with
    rejected tokens set to 0) and the metrics (``is_*``, ``rs_*``)."""

    weights: torch.Tensor
    keep: torch.Tensor
    metrics: dict[str, float] = field(default_factory=dict)


@torch.no_grad()
def rollout_correction(
    proximal_logprobs: torch.Tensor,
    rollout_logprobs: torch.Tensor,
    mask: torch.Tensor,
    is_level: ISLevel | None = "token",
    is_threshold: float = 2.0,
    rs_level: RSLevel | None = None,
    rs_threshold: float = 2.0,
    rs_threshold_lower: float | None = None,
    episode_ids: torch.Tensor | None = None,
) -> RolloutCorrection:
    """Importance weights and rejection for tokens sampled by the engine and trained by the trainer.

    IS (``is_level``): ``token``: ``min(rho_t, is_threshold)`` per token (truncated IS, biased, low
    variance); ``sequence``: ``min(prod_t rho_t, is_threshold)`` over the sequence's action tokens,
    the same weight on each of them (unbiased before truncation, high variance); None: weights 1.

    Rejection (``rs_level``): a token (``token``), or every token of a sequence, is masked out when
    its ratio lies outside ``[rs_threshold_lower, rs_threshold]`` (lower default ``1 /
    rs_threshold``), the ratio being ``rho_t``, ``prod_t rho_t`` (``sequence``) or ``exp(mean_t log
    rho_t)`` (``geometric``, length-independent). Rejection removes outliers that truncation would
    only bound: their gradient is wrong in direction, not just in size.
    """
    if is_level not in (None, "token", "sequence"):
        raise ValueError(f"rollout IS level must be token, sequence or None, not {is_level!r}")
    if rs_level not in (None, "token", "sequence", "geometric"):
        raise ValueError(
            f"rollout rejection level must be token, sequence, geometric or None, not {rs_level!r}"
        )
    if is_threshold <= 0 or rs_threshold <= 0:
        raise ValueError("importance and rejection thresholds must be positive")
    m = mask.to(torch.float32)
    log_rho = (proximal_logprobs.float() - rollout_logprobs.float()) * m
    metrics: dict[str, float] = {}
    weights = torch.ones_like(m)
    if is_level == "token":
        raw = torch.exp(log_rho.clamp(-SAFETY_BOUND, SAFETY_BOUND))
        weights = raw.clamp(max=is_threshold)
    elif is_level == "sequence":
        total, sequence = sequence_log_ratio(log_rho, m, episode_ids)
        raw = torch.exp(total.clamp(-SAFETY_BOUND, SAFETY_BOUND))[sequence].unsqueeze(1).expand_as(m)
        weights = raw.clamp(max=is_threshold)
    if is_level is not None:
        metrics["is_truncated_fraction"] = float(masked_mean((raw > is_threshold).float(), m))
        metrics["is_weight_mean"] = float(masked_mean(weights, m))
    keep = m.clone()
    if rs_level is not None:
        lower = rs_threshold_lower if rs_threshold_lower is not None else 1.0 / rs_threshold
        if rs_level == "token":
            log_ratio = log_rho
        else:
            total, sequence = sequence_log_ratio(log_rho, m, episode_ids, mean=rs_level == "geometric")
            log_ratio = total[sequence].unsqueeze(1).expand_as(m)
        inside = (log_ratio >= torch.log(torch.tensor(lower))) & (
            log_ratio <= torch.log(torch.tensor(rs_threshold))
        )
        keep = m * inside.float()
        metrics["rs_masked_fraction"] = float(masked_mean(1.0 - inside.float(), m))
    return RolloutCorrection((weights * m).detach(), keep, metrics)
