"""Masked reductions over ``[B, T]`` token tensors.

Every statistic the trainer takes over tokens (means for losses, variance for whitening) must skip
the tokens the policy did not produce (prompt, tool output, padding); these helpers are the one place
that does it.
"""

import torch


def masked_sum(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Sum of ``values`` where ``mask`` is 1 (over ``dim``, or everything)."""
    masked = values * mask
    return masked.sum() if dim is None else masked.sum(dim=dim)


def masked_mean(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of ``values`` where ``mask`` is 1; 0 (not NaN) when the mask is empty."""
    count = mask.sum() if dim is None else mask.sum(dim=dim)
    return masked_sum(values, mask, dim) / count.clamp(min=1)


def masked_var(values: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance of ``values`` over the tokens where ``mask`` is 1 (Bessel-corrected by default)."""
    mean = masked_mean(values, mask)
    centred_sq = (values - mean) ** 2
    count = mask.sum()
    var = masked_sum(centred_sq, mask) / count.clamp(min=1)
    if unbiased and count > 1:
        var = var * count / (count - 1)
    return var


def masked_whiten(
    values: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True, eps: float = 1e-8
) -> torch.Tensor:
    """Scale ``values`` to unit variance (and zero mean) over the masked tokens; 0 off the mask.

    Kept out of the advantage estimators on purpose: whether and where to whiten is a training
    choice (per batch, per data-parallel rank, globally), not part of the estimator's definition.
    """
    mean = masked_mean(values, mask)
    var = masked_var(values, mask)
    whitened = (values - mean) * torch.rsqrt(var + eps)
    if not shift_mean:
        whitened = whitened + mean
    return whitened * mask
