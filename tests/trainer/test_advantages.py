"""Every advantage estimator against a straightforward per-token Python loop on small inputs."""

import math
from dataclasses import replace

import pytest
import torch
from pydantic import ValidationError

from contract.registry import UnknownNameError
from trainer.advantages import ALGORITHMS, AdvantageBatch, AdvantageConfig, gae_estimator
from trainer.critic_free import (
    compute_grpo_advantages,
    compute_reinforce_pp_advantages,
    compute_rloo_advantages,
)
from trainer.gae import compute_gae, subtrajectory_bootstrap_values
from trainer.rows import place_episode_rewards
from trainer.settings import TrainerEnv, TrainerSettings


def reference_gae(rewards, values, mask, gamma, lam, bootstrap=None):
    """Row by row, token by token: the definition in the issue, with no vectorisation at all."""
    batch, width = len(mask), len(mask[0])
    adv = [[0.0] * width for _ in range(batch)]
    ret = [[0.0] * width for _ in range(batch)]
    for b in range(batch):
        actions = [t for t in range(width) if mask[b][t]]
        next_value = 0.0 if bootstrap is None else bootstrap[b]
        next_adv = 0.0
        for t in reversed(actions):
            delta = rewards[b][t] + gamma * next_value - values[b][t]
            next_adv = delta + gamma * lam * next_adv
            adv[b][t] = next_adv
            ret[b][t] = next_adv + values[b][t]
            next_value = values[b][t]
    return adv, ret


def random_case(seed: int, batch: int = 4, width: int = 11):
    gen = torch.Generator().manual_seed(seed)
    mask = (torch.rand(batch, width, generator=gen) < 0.6).long()
    mask[0] = 0  # an all-zero row
    mask[1, :4] = 0  # a prompt, then gaps
    rewards = torch.randn(batch, width, generator=gen, dtype=torch.float64)
    values = torch.randn(batch, width, generator=gen, dtype=torch.float64)
    bootstrap = torch.randn(batch, generator=gen, dtype=torch.float64)
    return rewards, values, mask, bootstrap


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize(("gamma", "lam"), [(1.0, 1.0), (0.99, 0.95), (0.9, 0.0), (0.5, 0.7)])
@pytest.mark.parametrize("with_bootstrap", [False, True])
def test_gae_matches_reference_with_gaps_and_bootstrap(seed, gamma, lam, with_bootstrap) -> None:
    rewards, values, mask, bootstrap = random_case(seed)
    boot = bootstrap if with_bootstrap else None
    adv, ret = compute_gae(rewards, values, mask, gamma, lam, boot)
    ref_adv, ref_ret = reference_gae(
        rewards.tolist(), values.tolist(), mask.tolist(), gamma, lam, None if boot is None else boot.tolist()
    )
    torch.testing.assert_close(adv, torch.tensor(ref_adv, dtype=torch.float64))
    torch.testing.assert_close(ret, torch.tensor(ref_ret, dtype=torch.float64))
    assert (adv[mask == 0] == 0).all() and (ret[mask == 0] == 0).all()


def test_gae_hand_computed_row_skips_tool_tokens() -> None:
    # tokens: prompt, a0, tool, tool, a1, a2(reward 1); gamma 0.5, lam 1; values 0 except listed
    mask = torch.tensor([[0, 1, 0, 0, 1, 1]])
    rewards = torch.tensor([[9.0, 0, 9, 9, 0, 1]])  # rewards on mask-0 tokens are ignored
    values = torch.tensor([[5.0, 0.2, 5, 5, 0.4, 0.8]])
    adv, ret = compute_gae(rewards, values, mask, gamma=0.5, lam=1.0, bootstrap_values=torch.tensor([2.0]))
    # lam=1: A_t = discounted return over action steps (incl. bootstrap) - V_t
    g2 = 1 + 0.5 * 2.0
    g1 = 0 + 0.5 * g2
    g0 = 0 + 0.5 * g1
    torch.testing.assert_close(adv, torch.tensor([[0, g0 - 0.2, 0, 0, g1 - 0.4, g2 - 0.8]]))
    torch.testing.assert_close(ret, torch.tensor([[0, g0, 0, 0, g1, g2]]))


def test_gae_keeps_float32_and_rejects_bad_shapes() -> None:
    mask = torch.ones(2, 3)
    adv, _ = compute_gae(torch.zeros(2, 3), torch.zeros(2, 3, dtype=torch.bfloat16), mask, 1.0, 1.0)
    assert adv.dtype == torch.float32
    with pytest.raises(ValueError, match="does not match"):
        compute_gae(torch.zeros(2, 4), torch.zeros(2, 3), mask, 1.0, 1.0)
    with pytest.raises(ValueError, match="bootstrap_values"):
        compute_gae(torch.zeros(2, 3), torch.zeros(2, 3), mask, 1.0, 1.0, torch.zeros(3))


# An episode layout used below: rows are sub-trajectories, out of order on purpose.
#   episode 7 (task 0): rows 2 (sub 0), 0 (sub 1), 3 (sub 2, last, terminated)
#   episode 8 (task 0): row 1 (sub 0, last, truncated)
#   episode 9 (task 1): row 4 (sub 0, last, terminated)
EPISODES = torch.tensor([7, 8, 7, 7, 9])
GROUPS = torch.tensor([0, 0, 0, 0, 1])
SUB = torch.tensor([1, 0, 0, 2, 0])
IS_LAST = torch.tensor([False, True, False, True, True])
TRUNC = torch.tensor([False, True, False, False, False])
MASK = torch.tensor(
    [
        [0, 0, 1, 1, 0, 1, 0],
        [0, 1, 1, 0, 1, 1, 0],
        [0, 1, 0, 1, 1, 0, 0],
        [0, 0, 0, 1, 0, 1, 1],
        [0, 0, 1, 1, 1, 0, 0],
    ]
)


def test_episode_reward_sits_on_last_action_token_of_last_subtrajectory() -> None:
    rewards = torch.tensor([0.0, 0.5, 0.0, 1.0, -1.0])
    token_rewards = place_episode_rewards(MASK, rewards, IS_LAST)
    expected = torch.zeros(5, 7)
    expected[1, 5] = 0.5
    expected[3, 6] = 1.0
    expected[4, 4] = -1.0
    torch.testing.assert_close(token_rewards, expected)


def test_subtrajectory_bootstrap_chains_to_successor_and_truncation_uses_critic() -> None:
    values = torch.arange(35, dtype=torch.float32).reshape(5, 7)
    final = torch.tensor([100.0, 101, 102, 103, 104])
    boot = subtrajectory_bootstrap_values(values, MASK, EPISODES, SUB, IS_LAST, TRUNC, final)
    # row 2 (sub 0) -> row 0 (sub 1) first action token 2: values[0, 2] = 2
    # row 0 (sub 1) -> row 3 (sub 2) first action token 3: values[3, 3] = 24
    # row 3 last, terminated -> 0; row 1 last, truncated -> final 101; row 4 terminated -> 0
    torch.testing.assert_close(boot, torch.tensor([24.0, 101, 2, 0, 0]))


def test_subtrajectory_bootstrap_refuses_missing_successor() -> None:
    keep = torch.tensor([0, 1, 2, 4])  # drop episode 7's last sub-trajectory
    values = torch.zeros(4, 7)
    with pytest.raises(ValueError, match="next one is missing"):
        subtrajectory_bootstrap_values(
            values, MASK[keep], EPISODES[keep], SUB[keep], IS_LAST[keep], TRUNC[keep], torch.zeros(4)
        )


def test_per_row_mode_bootstraps_each_row_from_its_successor() -> None:
    """``chain_subtrajectories=False`` (the comparison mode): each row is GAE with its successor's
    first-action value as bootstrap; with lam=0 (one-step TD) episode 7's three sub-trajectories then
    give exactly the TD errors of one concatenated row."""
    gen = torch.Generator().manual_seed(3)
    values = torch.randn(5, 7, generator=gen, dtype=torch.float64)
    final = torch.randn(5, generator=gen, dtype=torch.float64)
    token_rewards = place_episode_rewards(MASK, torch.tensor([0.0, 0.5, 0.0, 1.0, -1.0]), IS_LAST)
    token_rewards = token_rewards.double() + 0.1 * MASK  # dense per-token rewards too
    batch = AdvantageBatch(token_rewards, MASK, EPISODES, GROUPS, SUB, IS_LAST, TRUNC, values, final)
    estimator = gae_estimator

    per_row = dict(chain_subtrajectories=False, bootstrap_truncated=True)
    adv, _ = estimator(batch, AdvantageConfig(gamma=0.9, lam=0.8, **per_row))
    boot = [float(values[3, 3]), float(final[1]), float(values[0, 2]), 0.0, 0.0]  # see bootstrap test
    ref_adv, _ = reference_gae(token_rewards.tolist(), values.tolist(), MASK.tolist(), 0.9, 0.8, boot)
    torch.testing.assert_close(adv, torch.tensor(ref_adv, dtype=torch.float64))

    td, _ = estimator(batch, AdvantageConfig(gamma=0.9, lam=0.0, **per_row))
    order = [2, 0, 3]  # episode 7 by sub_index
    long_r = torch.cat([token_rewards[r] for r in order]).unsqueeze(0)
    long_v = torch.cat([values[r] for r in order]).unsqueeze(0)
    long_m = torch.cat([MASK[r] for r in order]).unsqueeze(0)
    long_td, _ = compute_gae(long_r, long_v, long_m, 0.9, 0.0)
    torch.testing.assert_close(torch.cat([td[r] for r in order]), long_td[0])


def episode_rewards_reference(token_rewards, mask):
    totals = {}
    for row, episode in enumerate(EPISODES.tolist()):
        totals[episode] = totals.get(episode, 0.0) + sum(
            r for r, m in zip(token_rewards[row].tolist(), mask[row].tolist(), strict=True) if m
        )
    return totals


def grouped(values_by_episode):
    groups = {}
    for episode, group in zip(EPISODES.tolist(), GROUPS.tolist(), strict=True):
        groups.setdefault(group, {})[episode] = values_by_episode[episode]
    return groups


def broadcast(per_episode, mask):
    return torch.tensor(
        [
            [per_episode[e] if m else 0.0 for m in mask[row].tolist()]
            for row, e in enumerate(EPISODES.tolist())
        ],
        dtype=torch.float64,
    )


@pytest.fixture
def outcome_rewards():
    return place_episode_rewards(MASK, torch.tensor([0.0, 0.5, 0.0, 2.0, -1.0], dtype=torch.float64), IS_LAST)


def test_grpo_normalises_episodes_within_task(outcome_rewards) -> None:
    # min_group_size=1 lets task 1's lone episode through (it is refused by default, see below)
    adv, ret = compute_grpo_advantages(outcome_rewards, MASK, EPISODES, GROUPS, eps=1e-6, min_group_size=1)
    totals = episode_rewards_reference(outcome_rewards, MASK)
    per_episode = {}
    for members in grouped(totals).values():
        scores = list(members.values())
        if len(scores) == 1:
            mean, std = 0.0, 1.0
        else:
            mean = sum(scores) / len(scores)
            std = math.sqrt(sum((s - mean) ** 2 for s in scores) / (len(scores) - 1))
        for episode, score in members.items():
            per_episode[episode] = (score - mean) / (std + 1e-6)
    torch.testing.assert_close(adv, broadcast(per_episode, MASK))
    torch.testing.assert_close(ret, adv)
    # every action token of every sub-trajectory of episode 7 carries the same advantage
    assert adv[0, 2] == adv[2, 1] == adv[3, 6] != 0


def test_rloo_leaves_one_out(outcome_rewards) -> None:
    adv, _ = compute_rloo_advantages(outcome_rewards, MASK, EPISODES, GROUPS, min_group_size=1)
    totals = episode_rewards_reference(outcome_rewards, MASK)
    per_episode = {}
    for members in grouped(totals).values():
        for episode, score in members.items():
            others = [s for e, s in members.items() if e != episode]
            per_episode[episode] = score - sum(others) / len(others) if others else score
    torch.testing.assert_close(adv, broadcast(per_episode, MASK))


def test_reinforce_pp_returns_run_across_subtrajectories(outcome_rewards) -> None:
    gamma = 0.9
    token_rewards = outcome_rewards + 0.1 * MASK
    adv, ret = compute_reinforce_pp_advantages(token_rewards, MASK, gamma, EPISODES, SUB)
    # reference: concatenate each episode's rows by sub_index and take discounted return-to-go
    expected = torch.zeros_like(ret)
    for episode in EPISODES.unique().tolist():
        rows = sorted(
            (int(s), r)
            for r, (e, s) in enumerate(zip(EPISODES.tolist(), SUB.tolist(), strict=True))
            if e == episode
        )
        running = 0.0
        for _, row in reversed(rows):
            for t in reversed(range(MASK.shape[1])):
                if MASK[row, t]:
                    running = float(token_rewards[row, t]) + gamma * running
                    expected[row, t] = running
    torch.testing.assert_close(ret, expected)
    flat = expected[MASK.bool()]
    whitened = (flat - flat.mean()) / torch.sqrt(flat.var() + 1e-8)
    torch.testing.assert_close(adv[MASK.bool()], whitened)
    assert (adv[MASK == 0] == 0).all()


def test_every_algorithm_is_registered_by_its_algo_name_and_only_ppo_needs_a_critic() -> None:
    assert ALGORITHMS.names() == ["grpo", "opd", "ppo", "reinforce_pp", "rloo"]
    assert [name for name, algorithm in ALGORITHMS.items() if algorithm.needs_critic] == ["ppo"]
    assert ALGORITHMS.get("ppo").estimate is gae_estimator
    with pytest.raises(UnknownNameError, match="unknown algorithm 'a2c'; known: grpo, opd, ppo"):
        ALGORITHMS.get("a2c")


@pytest.mark.parametrize("name", ["grpo", "rloo"])
def test_group_baselines_refuse_a_lone_episode(outcome_rewards, name) -> None:
    """Task 1 has one episode: no baseline exists for it, so the estimator says so instead of
    passing its raw reward off as an advantage (never negative for 0/1 rewards)."""
    batch = AdvantageBatch(outcome_rewards, MASK, EPISODES, GROUPS, SUB, IS_LAST, TRUNC)
    with pytest.raises(ValueError, match=r"at least 2 episodes of each task.*group \(episodes\): 1 \(1\)"):
        ALGORITHMS.get(name).estimate(batch, AdvantageConfig())
    whole = torch.tensor([0, 0, 0, 0, 0])  # every episode in one group: accepted
    adv, _ = ALGORITHMS.get(name).estimate(replace(batch, group_ids=whole), AdvantageConfig())
    assert adv.abs().sum() > 0


def test_dr_grpo_centres_without_dividing_by_the_std(outcome_rewards) -> None:
    whole = torch.tensor([0, 0, 0, 0, 0])
    adv, _ = compute_grpo_advantages(outcome_rewards, MASK, EPISODES, whole, norm_by_std=False)
    totals = episode_rewards_reference(outcome_rewards, MASK)  # episodes 7: 2.0, 8: 0.5, 9: -1.0
    mean = sum(totals.values()) / 3
    torch.testing.assert_close(adv, broadcast({e: r - mean for e, r in totals.items()}, MASK))


def test_the_algo_setting_must_name_a_registered_algorithm(monkeypatch) -> None:
    """``trainer.algo`` is checked against ``ALGORITHMS``, not a hand-kept list: one clear error."""
    assert TrainerSettings(algo="rloo").algo == "rloo"
    with pytest.raises(ValidationError) as caught:
        TrainerSettings(algo="dpo")
    (error,) = caught.value.errors()
    assert error["loc"] == ("algo",)
    assert error["msg"] == "Value error, unknown algorithm 'dpo'; known: grpo, opd, ppo, reinforce_pp, rloo"
    monkeypatch.setenv("RLGUARD_TRAINER__ALGO", "a2c")
    with pytest.raises(ValidationError, match="unknown algorithm 'a2c'; known: grpo"):
        TrainerEnv()
