"""The train-inference gap: metrics and rollout correction against hand computations; temperature
and the fp32 LM head of the trainer's logprobs."""

from __future__ import annotations

import math

import pytest
import torch

from trainer.mismatch import mismatch_metrics, rollout_correction
from trainer.models import load_actor, token_logprobs

# Two rows (episodes 0 and 1); row 0 has 3 action tokens, row 1 has 2.
MASK = torch.tensor([[0, 1, 1, 1], [0, 0, 1, 1]])
LOG_RHO = [[0.0, 0.1, -0.4, 0.2], [0.0, 0.0, 0.5, -0.05]]  # log pi_prox - log pi_engine
ROLLOUT = torch.tensor([[0.0, -1.0, -2.0, -0.5], [0.0, 0.0, -1.5, -0.7]])
PROXIMAL = ROLLOUT + torch.tensor(LOG_RHO)


def action_values(table):
    return [table[r][t] for r in range(2) for t in range(4) if MASK[r, t]]


def test_mismatch_metrics_by_hand() -> None:
    m = mismatch_metrics(PROXIMAL, ROLLOUT, MASK, clip_low=0.2, clip_high=0.28)
    logs = action_values(LOG_RHO)  # 0.1, -0.4, 0.2, 0.5, -0.05
    assert m["kl"] == pytest.approx(sum(-x for x in logs) / 5)
    assert m["k3_kl"] == pytest.approx(sum(math.exp(x) - x - 1 for x in logs) / 5)
    assert m["chi2_token"] == pytest.approx(sum(math.exp(2 * x) for x in logs) / 5 - 1)
    per_row = [[0.1, -0.4, 0.2], [0.5, -0.05]]
    ppl = [-sum(r) / len(r) for r in per_row]  # trainer log-ppl minus engine log-ppl, per sequence
    assert m["log_ppl_diff"] == pytest.approx(sum(ppl) / 2)
    assert m["log_ppl_abs_diff"] == pytest.approx(sum(abs(x) for x in ppl) / 2)
    assert m["chi2_seq"] == pytest.approx(sum(math.exp(2 * sum(r)) for r in per_row) / 2 - 1)
    # rho outside [0.8, 1.28]: exp(-0.4) = 0.67 and exp(0.5) = 1.65
    assert m["outside_clip_fraction"] == pytest.approx(2 / 5)


def test_mismatch_metrics_of_one_episode_over_two_rows() -> None:
    m = mismatch_metrics(PROXIMAL, ROLLOUT, MASK, episode_ids=torch.tensor([7, 7]))
    total = sum(action_values(LOG_RHO))
    assert m["chi2_seq"] == pytest.approx(math.exp(2 * total) - 1)
    assert m["log_ppl_diff"] == pytest.approx(-total / 5)


def test_identical_logprobs_have_no_gap_and_an_empty_mask_gives_zeros() -> None:
    m = mismatch_metrics(ROLLOUT, ROLLOUT, MASK)
    assert all(v == pytest.approx(0.0, abs=1e-12) for v in m.values()), m
    assert set(mismatch_metrics(PROXIMAL, ROLLOUT, torch.zeros_like(MASK)).values()) == {0.0}


def test_token_is_truncates_each_token() -> None:
    out = rollout_correction(PROXIMAL, ROLLOUT, MASK, is_level="token", is_threshold=1.5)
    expected = [[0.0] + [min(math.exp(x), 1.5) for x in LOG_RHO[0][1:]], [0.0, 0.0, 1.5, math.exp(-0.05)]]
    torch.testing.assert_close(out.weights, torch.tensor(expected))
    assert out.metrics["is_truncated_fraction"] == pytest.approx(1 / 5)
    assert torch.equal(out.keep, MASK.float())


def test_sequence_is_puts_the_product_on_every_token_of_the_episode() -> None:
    out = rollout_correction(PROXIMAL, ROLLOUT, MASK, is_level="sequence", is_threshold=10.0)
    row0, row1 = math.exp(0.1 - 0.4 + 0.2), math.exp(0.5 - 0.05)
    torch.testing.assert_close(out.weights, torch.tensor([[0, row0, row0, row0], [0, 0, row1, row1]]))
    together = rollout_correction(
        PROXIMAL, ROLLOUT, MASK, is_level="sequence", is_threshold=1.1, episode_ids=torch.tensor([3, 3])
    )
    episode = min(math.exp(0.1 - 0.4 + 0.2 + 0.5 - 0.05), 1.1)
    torch.testing.assert_close(together.weights, episode * MASK.float())


@pytest.mark.parametrize(
    ("level", "threshold", "kept"),
    [
        ("token", 1.4, [[0, 1, 0, 1], [0, 0, 0, 1]]),  # exp(-0.4) < 1/1.4 and exp(0.5) > 1.4: rejected
        ("sequence", 1.6, [[0, 1, 1, 1], [0, 0, 1, 1]]),  # row products exp(-0.1), exp(0.45): inside
        ("geometric", 1.3, [[0, 1, 1, 1], [0, 0, 1, 1]]),  # exp(-0.1/3), exp(0.225) = 1.25: inside
        ("geometric", 1.1, [[0, 1, 1, 1], [0, 0, 0, 0]]),  # exp(0.225) = 1.25 > 1.1: row 1 rejected
    ],
)
def test_rejection_masks_outliers(level, threshold, kept) -> None:
    out = rollout_correction(PROXIMAL, ROLLOUT, MASK, is_level=None, rs_level=level, rs_threshold=threshold)
    assert out.keep.tolist() == kept
    assert torch.equal(out.weights, MASK.float())  # no IS asked: weights 1 on the mask
    tight = rollout_correction(PROXIMAL, ROLLOUT, MASK, None, rs_level="sequence", rs_threshold=1.2)
    assert tight.keep.tolist() == [[0, 1, 1, 1], [0, 0, 0, 0]]  # exp(0.45) = 1.57 > 1.2: row 1 rejected
    assert tight.metrics["rs_masked_fraction"] == pytest.approx(2 / 5)


def test_bad_levels_are_refused() -> None:
    with pytest.raises(ValueError, match="IS level"):
        rollout_correction(PROXIMAL, ROLLOUT, MASK, is_level="episode")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="rejection level"):
        rollout_correction(PROXIMAL, ROLLOUT, MASK, rs_level="max")  # type: ignore[arg-type]


def test_temperature_scores_the_distribution_that_was_sampled(tiny_model_dir) -> None:
    actor = load_actor(tiny_model_dir)
    ids = torch.tensor([[2, 3, 7, 8, 9]])
    attention = torch.ones_like(ids)
    scaled, entropy = token_logprobs(actor, ids, attention, with_entropy=True, temperature=0.7)
    with torch.no_grad():
        logits = actor(input_ids=ids).logits.float() / 0.7
    logp = torch.log_softmax(logits, dim=-1)
    expected = logp[0, :-1].gather(1, ids[0, 1:, None]).squeeze(1)
    torch.testing.assert_close(scaled[0, 1:], expected)
    torch.testing.assert_close(entropy[0, 1:], -(logp.exp() * logp).sum(-1)[0, :-1])
    with pytest.raises(ValueError, match="temperature"):
        token_logprobs(actor, ids, attention, temperature=0.0)


def test_the_lm_head_runs_in_fp32_under_bf16_autocast(tiny_model_dir) -> None:
    actor = load_actor(tiny_model_dir)
    head = actor.get_output_embeddings()
    hidden = torch.randn(2, 3, head.in_features)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = head(hidden.to(torch.bfloat16))
        plain = torch.nn.functional.linear(hidden.to(torch.bfloat16), head.weight)  # what autocast does
    assert out.dtype == torch.float32 and plain.dtype == torch.bfloat16
    torch.testing.assert_close(out, hidden.to(torch.bfloat16).float() @ head.weight.T)
    assert "lm_head.weight" in actor.state_dict()  # HF names unchanged: checkpoints stay HF format
