"""Loss values, clipping behaviour and gradients on tiny tensors (autograd vs finite differences)."""

import math

import pytest
import torch

from trainer.losses import (
    agg_loss,
    agg_normaliser,
    compute_entropy_bonus,
    compute_kl_loss,
    compute_policy_loss,
    compute_value_loss,
    entropy_from_logits,
    explained_variance,
    kl_penalty,
    rewards_with_kl_penalty,
    truncated_importance_weights,
)

MASK = torch.tensor([[0, 1, 1, 1], [1, 1, 0, 0]], dtype=torch.float64)


@pytest.mark.parametrize(
    "mode", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
)
def test_micro_batches_with_a_global_normaliser_add_up_to_the_whole_batch(mode) -> None:
    """What the trainer does across micro-batches and ranks: each part divides by the global count
    (agg_normaliser summed), and the parts add up to the loss of the whole batch."""
    gen = torch.Generator().manual_seed(0)
    loss = torch.randn(5, 6, generator=gen, dtype=torch.float64)
    mask = (torch.rand(5, 6, generator=gen) < 0.6).double()
    mask[2] = 0  # a row with no action token counts for no sequence
    whole = agg_loss(loss, mask, mode, loss_scale_factor=7)
    norm = agg_normaliser(mask[:2], mode) + agg_normaliser(mask[2:], mode)
    parts = agg_loss(loss[:2], mask[:2], mode, norm, 7) + agg_loss(loss[2:], mask[2:], mode, norm, 7)
    assert parts.item() == pytest.approx(whole.item())


def test_agg_modes_differ_as_defined() -> None:
    loss = torch.tensor([[9.0, 1, 2, 3], [4, 5, 9, 9]], dtype=torch.float64)
    assert agg_loss(loss, MASK, "token-mean").item() == pytest.approx((1 + 2 + 3 + 4 + 5) / 5)
    assert agg_loss(loss, MASK, "seq-mean-token-sum").item() == pytest.approx((6 + 9) / 2)
    assert agg_loss(loss, MASK, "token-mean", normaliser=10).item() == pytest.approx(15 / 10)
    # every row weighs the same: (mean of 1,2,3 + mean of 4,5) / 2
    assert agg_loss(loss, MASK, "seq-mean-token-mean").item() == pytest.approx((2 + 4.5) / 2)
    # Dr.GRPO: token sums over a constant budget (here 8), then the mean over rows
    assert agg_loss(loss, MASK, "seq-mean-token-sum-norm", loss_scale_factor=8).item() == pytest.approx(
        (6 + 9) / 8 / 2
    )
    assert agg_loss(loss, MASK, "seq-mean-token-sum-norm").item() == pytest.approx((6 + 9) / 4 / 2)  # width
    with pytest.raises(ValueError, match="unknown loss aggregation"):
        agg_loss(loss, MASK, "seq-mean")  # type: ignore[arg-type]


def per_token_reference(logp, old, adv, clip_low, clip_high, clip_c):
    ratio = math.exp(max(min(logp - old, 20), -20))
    surrogate = max(-adv * ratio, -adv * min(max(ratio, 1 - clip_low), 1 + clip_high))
    if adv < 0 and clip_c is not None:
        surrogate = min(surrogate, -adv * clip_c)
    return surrogate


@pytest.mark.parametrize("clip_c", [None, 3.0])
def test_policy_loss_matches_per_token_reference(clip_c) -> None:
    gen = torch.Generator().manual_seed(0)
    logp = torch.randn(2, 4, generator=gen, dtype=torch.float64)
    old = logp + torch.tensor([[0, 0.5, -0.5, 3.0], [-2.0, 0.05, 0, 0]], dtype=torch.float64)
    adv = torch.tensor([[1.0, 1.0, -1.0, -2.0], [-1.5, 0.3, 1, 1]], dtype=torch.float64)
    out = compute_policy_loss(logp, old, adv, MASK, clip_low=0.2, clip_high=0.28, clip_ratio_c=clip_c)
    per_token = [
        per_token_reference(logp[b, t].item(), old[b, t].item(), adv[b, t].item(), 0.2, 0.28, clip_c)
        for b in range(2)
        for t in range(4)
        if MASK[b, t]
    ]
    assert out.loss.item() == pytest.approx(sum(per_token) / len(per_token))
    log_ratio = (logp - old)[MASK.bool()]
    assert out.approx_kl.item() == pytest.approx((-log_ratio).mean().item())
    assert 0 < out.clip_fraction.item() < 1


def test_policy_gradient_vanishes_when_clipped_and_flows_when_not() -> None:
    old = torch.zeros(1, 3, dtype=torch.float64)
    adv = torch.tensor([[1.0, 1.0, -1.0]], dtype=torch.float64)
    # token 0: ratio 1.5 > 1+eps with A>0 -> clipped, no gradient; token 1: ratio 1.0 -> gradient;
    # token 2: ratio 0.5 < 1-eps with A<0 -> clipped, no gradient
    logp = torch.log(torch.tensor([[1.5, 1.0, 0.5]], dtype=torch.float64)).requires_grad_()
    out = compute_policy_loss(
        logp, old, adv, torch.ones(1, 3), clip_low=0.2, clip_high=0.2, clip_ratio_c=None
    )
    out.loss.backward()
    assert logp.grad[0, 0] == 0 and logp.grad[0, 2] == 0
    assert logp.grad[0, 1].item() == pytest.approx(-1.0 / 3)  # d(-A·ratio)/dlogp = -A·ratio, mean over 3
    assert out.clip_fraction.item() == pytest.approx(2 / 3)


def test_dual_clip_caps_huge_ratio_on_negative_advantage() -> None:
    logp = torch.tensor([[math.log(10.0)]], dtype=torch.float64, requires_grad=True)
    out = compute_policy_loss(
        logp, torch.zeros(1, 1, dtype=torch.float64), -torch.ones(1, 1), torch.ones(1, 1)
    )
    assert out.loss.item() == pytest.approx(3.0)  # -A·clip_ratio_c, not -A·10
    out.loss.backward()
    assert logp.grad.item() == 0.0
    assert out.clip_fraction_lower.item() == 1.0


def test_log_ratio_clamp_keeps_loss_finite() -> None:
    logp = torch.tensor([[0.0]], requires_grad=True)
    out = compute_policy_loss(logp, torch.tensor([[-500.0]]), torch.ones(1, 1), torch.ones(1, 1))
    assert torch.isfinite(out.loss) and torch.isfinite(out.approx_kl)


def finite_difference_check(fn, x: torch.Tensor) -> None:
    x = x.clone().requires_grad_()
    assert torch.autograd.gradcheck(fn, (x,), eps=1e-6, atol=1e-5)


def test_policy_loss_gradient_matches_finite_differences() -> None:
    gen = torch.Generator().manual_seed(1)
    old = torch.randn(2, 4, generator=gen, dtype=torch.float64)
    adv = torch.randn(2, 4, generator=gen, dtype=torch.float64)
    # stay inside the clip region (small moves) and away from the kinks
    logp = old + 0.05 * torch.randn(2, 4, generator=gen, dtype=torch.float64)
    finite_difference_check(
        lambda lp: compute_policy_loss(lp, old, adv, MASK, agg_mode="seq-mean-token-sum").loss, logp
    )


def test_value_loss_clips_and_its_gradient_is_right() -> None:
    old = torch.zeros(1, 2, dtype=torch.float64)
    returns = torch.tensor([[1.0, 1.0]], dtype=torch.float64)
    values = torch.tensor([[0.1, 0.5]], dtype=torch.float64, requires_grad=True)
    out = compute_value_loss(values, old, returns, torch.ones(1, 2), clip_range=0.2)
    # token 0 within the clip: 0.5·(0.1-1)^2; token 1 clipped to 0.2: max((0.5-1)^2, (0.2-1)^2) = 0.64
    assert out.loss.item() == pytest.approx(0.5 * ((0.81 + 0.64) / 2))
    out.loss.backward()
    assert values.grad[0, 1] == 0 and values.grad[0, 0].item() == pytest.approx(0.5 * 2 * (0.1 - 1) / 2)
    assert out.clip_fraction.item() == 0.5
    gen = torch.Generator().manual_seed(2)
    v = torch.randn(2, 4, generator=gen, dtype=torch.float64)
    finite_difference_check(lambda x: compute_value_loss(x, v, v + 1, MASK, clip_range=None).loss, v)


def test_kl_estimators() -> None:
    logp = torch.tensor([[-1.0, -2.0]], dtype=torch.float64)
    ref = torch.tensor([[-1.5, -1.0]], dtype=torch.float64)
    k1 = kl_penalty(logp, ref, "k1")
    torch.testing.assert_close(k1, logp - ref)
    k3 = kl_penalty(logp, ref, "k3")
    torch.testing.assert_close(k3, torch.exp(ref - logp) - (ref - logp) - 1)
    assert (k3 >= 0).all() and kl_penalty(logp, logp, "k3").abs().max() == 0
    shaped = rewards_with_kl_penalty(torch.ones(1, 2), k1, torch.tensor([[1, 0]]), beta=0.1)
    torch.testing.assert_close(shaped, torch.tensor([[1 - 0.1 * 0.5, 1.0]], dtype=torch.float64))
    finite_difference_check(lambda x: compute_kl_loss(x, ref, torch.ones(1, 2), "k3"), logp)


def test_k3_is_unbiased_for_true_kl() -> None:
    """Sampling from pi, the mean k3 estimate converges to KL(pi || ref)."""
    gen = torch.Generator().manual_seed(0)
    pi = torch.tensor([0.7, 0.2, 0.1], dtype=torch.float64)
    ref = torch.tensor([0.3, 0.3, 0.4], dtype=torch.float64)
    samples = torch.multinomial(pi, 200_000, replacement=True, generator=gen)
    k3 = kl_penalty(pi.log()[samples], ref.log()[samples], "k3")
    true_kl = (pi * (pi / ref).log()).sum()
    assert k3.mean().item() == pytest.approx(true_kl.item(), rel=0.02)


def test_entropy_bonus_is_masked_and_uniform_is_log_vocab() -> None:
    logits = torch.zeros(2, 4, 5)
    logits[1, :2] = torch.tensor([10.0, 0, 0, 0, 0])  # confident tokens at masked-in positions
    ent = entropy_from_logits(logits)
    assert ent[0, 0].item() == pytest.approx(math.log(5))
    bonus = compute_entropy_bonus(logits, MASK)
    expected = (3 * math.log(5) + 2 * ent[1, 0].item()) / 5
    assert bonus.item() == pytest.approx(expected, rel=1e-5)


def test_truncated_importance_weights_cap_and_detach() -> None:
    prox = torch.tensor([0.0, 0.0, -5.0], requires_grad=True)
    weights = truncated_importance_weights(prox, torch.tensor([0.0, -5.0, 0.0]), cap=2.0)
    torch.testing.assert_close(weights, torch.tensor([1.0, 2.0, math.exp(-5.0)]))
    assert not weights.requires_grad


def test_explained_variance() -> None:
    returns = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    mask = torch.ones(1, 4)
    assert explained_variance(returns, returns, mask).item() == pytest.approx(1.0)
    assert explained_variance(torch.full_like(returns, 2.5), returns, mask).item() == pytest.approx(0.0)
