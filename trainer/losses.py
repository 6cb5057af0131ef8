"""PPO-family losses as pure functions over ``[B, T]`` token tensors.

Each loss returns the scalar to back-propagate and, where it has any, the diagnostics a run logs
(clip fractions, approximate KL). ``mask`` is the action mask: only tokens the policy produced
contribute. Aggregation follows verl's ``agg_loss`` names (a *sequence* is a row: one sub-trajectory):

* ``token-mean``: every action token in the batch weighs the same (long answers weigh more);
* ``seq-mean-token-sum``: sum over a row's action tokens, mean over rows with any action token;
* ``seq-mean-token-mean``: mean over a row's action tokens, mean over rows (every row weighs the
  same, whatever its length);
* ``seq-mean-token-sum-norm``: sum over a row's tokens divided by a *constant* ``loss_scale_factor``
  (Dr.GRPO's generation budget), mean over rows: no length normalisation that would favour long
  wrong answers, and a gradient scale that does not move with the batch's lengths.

All accept a ``normaliser`` (the global token or row count) so micro-batches and data-parallel ranks
can each contribute their share of one global mean by gradient accumulation.

The train-inference gap (:func:`mismatch_metrics`, :func:`rollout_correction`): the engine that
sampled (vLLM, SGLang, bf16 kernels) and the trainer do not give a token the same probability. The
trainer therefore anchors PPO's ratio to its own (proximal) logprob of every token and measures the
gap to the engine's logprobs every step; optional importance weights and rejection correct for it,
as verl's ``rollout_corr`` does (token- or sequence-level truncated IS; token-, sequence- or
geometric-level rejection).
"""

from dataclasses import dataclass
from typing import Literal

import torch

from trainer.masked import masked_mean

AggMode = Literal["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
AGG_MODES: tuple[str, ...] = AggMode.__args__  # type: ignore[attr-defined]
KLKind = Literal["k1", "k3"]
LOG_RATIO_CLAMP = 20.0


def agg_loss(
    loss_mat: torch.Tensor,
    mask: torch.Tensor,
    mode: AggMode = "token-mean",
    normaliser: float | None = None,
    loss_scale_factor: float | None = None,
) -> torch.Tensor:
    """Aggregate per-token losses to a scalar; ``normaliser`` overrides the local token/row count.

    ``loss_scale_factor`` is ``seq-mean-token-sum-norm``'s constant divisor (default: the padded
    width ``mask.shape[-1]``, verl's default; pass a constant, e.g. the generation budget, so the
    divisor does not change from batch to batch).
    """
    mask = mask.to(loss_mat.dtype)
    if mode not in AGG_MODES:
        raise ValueError(f"unknown loss aggregation {mode!r}; use one of {', '.join(AGG_MODES)}")
    if mode == "token-mean":
        total = (loss_mat * mask).sum()
        count = mask.sum() if normaliser is None else torch.tensor(float(normaliser))
        return total / count.to(total.device, total.dtype).clamp(min=1)
    per_row = (loss_mat * mask).sum(dim=1)
    if mode == "seq-mean-token-mean":
        per_row = per_row / mask.sum(dim=1).clamp(min=1)
    elif mode == "seq-mean-token-sum-norm":
        per_row = per_row / float(loss_scale_factor if loss_scale_factor is not None else mask.shape[-1])
    count = (mask.sum(dim=1) > 0).sum() if normaliser is None else torch.tensor(float(normaliser))
    return per_row.sum() / count.to(per_row.device, per_row.dtype).clamp(min=1)


def agg_normaliser(mask: torch.Tensor, mode: AggMode) -> float:
    """The count :func:`agg_loss` divides by for ``mode`` (sum it over micro-batches and ranks):
    action tokens for ``token-mean``, rows with any action token for the ``seq-mean-*`` modes."""
    if mode not in AGG_MODES:
        raise ValueError(f"unknown loss aggregation {mode!r}; use one of {', '.join(AGG_MODES)}")
    if mode == "token-mean":
        return float(mask.sum())
    return float((mask.sum(dim=1) > 0).sum())


@dataclass(frozen=True)
class PolicyLossOutput:
    loss: torch.Tensor
    clip_fraction: torch.Tensor
    clip_fraction_lower: torch.Tensor
    approx_kl: torch.Tensor


def compute_policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    clip_ratio_c: float | None = 3.0,
    agg_mode: AggMode = "token-mean",
    is_weights: torch.Tensor | None = None,
    normaliser: float | None = None,
    loss_scale_factor: float | None = None,
) -> PolicyLossOutput:
    """Clipped-ratio PPO loss with asymmetric clip and dual clip.

    ``ratio = exp(clamp(logprobs - old_logprobs, ±20))`` (the clamp keeps a stale token from
    overflowing ``exp``). The surrogate is ``max(-A·ratio, -A·clip(ratio, 1-clip_low, 1+clip_high))``;
    for negative advantages it is further capped at ``-A·clip_ratio_c`` (dual clip, Ye et al. 2020) so
    a huge ratio on a bad token cannot dominate. ``is_weights`` (detached; truncated importance
    weights for stale data) multiply the per-token loss.
    """
    if clip_ratio_c is not None and clip_ratio_c <= 1.0:
        raise ValueError(f"clip_ratio_c must be > 1, got {clip_ratio_c}")
    mask = mask.to(logprobs.dtype)
    log_ratio = torch.clamp(logprobs - old_logprobs, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)
    approx_kl = masked_mean(-log_ratio, mask).detach()

    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    surrogate = torch.maximum(unclipped, clipped)
    clip_fraction = masked_mean((clipped > unclipped).to(mask.dtype), mask).detach()
    if clip_ratio_c is not None:
        dual = -advantages * clip_ratio_c
        negative = advantages < 0
        clip_fraction_lower = masked_mean(((surrogate > dual) & negative).to(mask.dtype), mask).detach()
        surrogate = torch.where(negative, torch.minimum(surrogate, dual), surrogate)
    else:
        clip_fraction_lower = torch.zeros((), dtype=mask.dtype, device=mask.device)
    if is_weights is not None:
        surrogate = surrogate * is_weights.detach()
    loss = agg_loss(surrogate, mask, agg_mode, normaliser, loss_scale_factor)
    return PolicyLossOutput(loss, clip_fraction, clip_fraction_lower, approx_kl)


@dataclass(frozen=True)
class ValueLossOutput:
    loss: torch.Tensor
    clip_fraction: torch.Tensor


def compute_value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    clip_range: float | None = 0.2,
    agg_mode: AggMode = "token-mean",
    normaliser: float | None = None,
    loss_scale_factor: float | None = None,
) -> ValueLossOutput:
    """``0.5 · max((V - R)², (clip(V, V_old ± c) - R)²)``: the critic moves at most ``c`` per update."""
    mask = mask.to(values.dtype)
    unclipped = (values - returns) ** 2
    if clip_range is None:
        per_token = unclipped
        clip_fraction = torch.zeros((), dtype=values.dtype, device=values.device)
    else:
        clipped_values = old_values + torch.clamp(values - old_values, -clip_range, clip_range)
        clipped = (clipped_values - returns) ** 2
        per_token = torch.maximum(unclipped, clipped)
        clip_fraction = masked_mean((clipped > unclipped).to(values.dtype), mask).detach()
    return ValueLossOutput(
        0.5 * agg_loss(per_token, mask, agg_mode, normaliser, loss_scale_factor), clip_fraction
    )


def kl_penalty(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, kind: KLKind = "k3") -> torch.Tensor:
    """Per-token KL(pi || pi_ref) estimate from sampled tokens (Schulman's k1 / k3 estimators).

    k1 = log pi - log pi_ref (unbiased, high variance, can be negative); k3 = exp(-k1) + k1 - 1
    (unbiased, non-negative, low variance), clamped to [-10, 10] like verl's ``low_var_kl``.
    """
    log_ratio = logprobs - ref_logprobs
    if kind == "k1":
        return log_ratio
    if kind == "k3":
        neg = torch.clamp(-log_ratio, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
        return torch.clamp(torch.exp(neg) - neg - 1.0, -10.0, 10.0)
    raise ValueError(f"unknown KL estimator {kind!r}; use k1 or k3")


def rewards_with_kl_penalty(
    token_rewards: torch.Tensor, kl: torch.Tensor, mask: torch.Tensor, beta: float
) -> torch.Tensor:
    """KL in the reward: ``r_t - beta · kl_t`` on action tokens (InstructGPT-style shaping)."""
    return token_rewards - beta * kl.detach() * mask


def compute_kl_loss(
    logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor,
    mask: torch.Tensor,
    kind: KLKind = "k3",
    agg_mode: AggMode = "token-mean",
    normaliser: float | None = None,
    loss_scale_factor: float | None = None,
) -> torch.Tensor:
    """KL as a loss term (GRPO-style): aggregated :func:`kl_penalty`, differentiable in ``logprobs``."""
    return agg_loss(kl_penalty(logprobs, ref_logprobs, kind), mask, agg_mode, normaliser, loss_scale_factor)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Per-position entropy of the categorical distribution over the vocabulary, ``[..., V] -> [...]``."""
    log_probs = torch.log_softmax(logits.float(), dim=-1)
    return -(log_probs.exp() * log_probs).sum(dim=-1)


def compute_entropy_bonus(
    logits: torch.Tensor,
    mask: torch.Tensor,
    agg_mode: AggMode = "token-mean",
    normaliser: float | None = None,
    loss_scale_factor: float | None = None,
) -> torch.Tensor:
    """Mean entropy over action tokens (subtract ``coef ·`` this from the loss to encourage exploration)."""
    return agg_loss(entropy_from_logits(logits), mask, agg_mode, normaliser, loss_scale_factor)


def truncated_importance_weights(
    proximal_logprobs: torch.Tensor, rollout_logprobs: torch.Tensor, cap: float = 2.0
) -> torch.Tensor:
    """TIS weights ``min(pi_prox / pi_rollout, cap)`` for data generated by an older policy version.

    When the rollout policy lags the one being trained, PPO's ratio is taken against the proximal
    (current, pre-update) policy and each token is reweighted by how much more likely the proximal
    policy finds it than the policy that generated it; truncating at ``cap`` bounds the variance.
    """
    log_w = torch.clamp(proximal_logprobs - rollout_logprobs, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    return torch.clamp(torch.exp(log_w), max=cap).detach()


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``1 - Var[R - V] / Var[R]`` over action tokens: 1 is a perfect critic, <= 0 a useless one."""
    mask = mask.to(values.dtype)
    mean_r = masked_mean(returns, mask)
    var_r = masked_mean((returns - mean_r) ** 2, mask)
    residual = returns - values
    var_res = masked_mean((residual - masked_mean(residual, mask)) ** 2, mask)
    if var_r <= 0:
        return torch.full((), float("nan"))
    return 1.0 - var_res / var_r
