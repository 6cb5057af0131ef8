"""The long-horizon credit benchmark: its environment's layout, the exact-critic check, the SNR, and a
small run where PPO with the chained trace learns the first-turn decision and per-row bootstrapping
does not."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from trainer.bench.credit_bench import (
    CreditParams,
    choice_snr,
    exact_critic_error,
    run_credit_bench,
    train_variant,
)
from trainer.bench.credit_env import BOS, SUMMARY, CreditConfig, build_template, play, sample_credit_tasks
from trainer.bench.learn_bench import GRUNet

SMALL = CreditConfig(turns=4, action_len=6, compact_every=(1, 2))


def test_default_episodes_are_long_and_cross_at_least_three_compactions() -> None:
    config = CreditConfig()
    assert config.turns >= 8 and config.action_len >= 64 and config.min_boundaries >= 3
    generator = torch.Generator().manual_seed(0)
    tasks = sample_credit_tasks(config, 32, generator)
    template = build_template(tasks, config, generator)
    assert (template.is_action.sum(dim=1) == config.turns * config.action_len).all()
    assert (template.is_choice.sum(dim=1) == 1).all()
    compactions = template.sub.max(dim=1).values
    assert (compactions >= config.min_boundaries).all()
    # a compacted context opens on BOS SUMMARY and environment noise: nothing of the choice
    opens = (template.tokens == BOS) & (template.sub > 0)
    after = template.tokens.roll(-1, dims=1)[opens]
    assert (after == SUMMARY).all()


def test_played_rows_keep_the_layout_and_reward_the_right_choice() -> None:
    generator = torch.Generator().manual_seed(1)
    policy = GRUNet(SMALL.vocab_size, SMALL.vocab_size, 8, 8)
    ro = play(policy, sample_credit_tasks(SMALL, 400, generator), SMALL, generator)
    rows = ro.rollout
    assert int(ro.is_choice.sum()) == 400 and (rows.sub_index[ro.is_choice.any(dim=1)] == 0).all()
    torch.testing.assert_close(rows.rewards, (ro.choice == SMALL.right_choice).float())
    assert 0.15 < float(rows.rewards.mean()) < 0.35  # an untrained policy: chance is 1/4
    assert torch.all((ro.p_right > 0) & (ro.p_right < 1))
    for episode in range(3):  # action tokens: the policy's logprobs; everything else logprob 0
        mine = rows.episode_ids == episode
        assert int(rows.action_mask[mine].sum()) == SMALL.turns * SMALL.action_len
        assert (rows.logprobs[mine][rows.action_mask[mine] == 0] == 0).all()


def test_chained_gae_with_the_exact_critic_is_monte_carlo() -> None:
    generator = torch.Generator().manual_seed(2)
    config = CreditConfig(turns=8, action_len=16)
    policy = GRUNet(config.vocab_size, config.vocab_size, 8, 8)
    ro = play(policy, sample_credit_tasks(config, 16, generator), config, generator)
    assert exact_critic_error(ro) <= 1e-6


def test_choice_snr_separates_right_from_wrong_choices() -> None:
    generator = torch.Generator().manual_seed(3)
    policy = GRUNet(SMALL.vocab_size, SMALL.vocab_size, 8, 8)
    ro = play(policy, sample_credit_tasks(SMALL, 64, generator), SMALL, generator)
    right = ro.right[ro.rollout.episode_ids].unsqueeze(1).float()
    informative = (right - 0.25) * ro.rollout.action_mask + 0.01 * torch.randn(ro.rollout.action_mask.shape)
    assert choice_snr(informative, ro) > 10
    assert abs(choice_snr(torch.randn(ro.rollout.action_mask.shape, generator=generator), ro)) < 1


@pytest.fixture
def one_thread():
    """A GRU this small runs fastest on one thread (and leaves the other core to the other jobs)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_chained_ppo_learns_the_first_turn_decision(one_thread) -> None:
    """A small version of the benchmark (4 turns, 1-2 turns per sub-trajectory): the default PPO
    learns the choice; the full-size comparison with per-row bootstrapping is the benchmark's job."""
    params = replace(
        CreditParams(), iterations=8, tasks_per_iter=8, minibatches=2, eval_episodes=128, warmup_iterations=2,
        embed=16, hidden=32,
    )  # fmt: skip
    result = train_variant("ppo", seed=0, params=params, config=SMALL)
    assert result.final_success >= 0.9 and result.first_turn_adv_snr > 1


def test_the_benchmark_reports_every_key(one_thread, tmp_path) -> None:
    params = replace(
        CreditParams(), iterations=1, tasks_per_iter=2, group_size=2, eval_episodes=8, embed=8, hidden=8
    )
    config = replace(SMALL, turns=2, action_len=2)
    result = run_credit_bench(params=params, workers=1, out_dir=tmp_path, config=config)
    for key in ("ppo_success", "grpo_success", "first_turn_adv_snr", "gae_vs_mc_error", "steps", "seconds"):
        assert key in result, key
    assert result["steps"] == 1 and result["gae_vs_mc_error"] <= 1e-6
    assert (tmp_path / "results.json").is_file()
