"""GAE chained across an episode's sub-trajectories: against a per-token Python loop, against the same
episode left uncompacted, against Monte-Carlo returns and, in expectation, against exact Q - V."""

from __future__ import annotations

import random

import pytest
import torch

from trainer.advantages import AdvantageBatch, AdvantageConfig, gae_estimator
from trainer.gae import compute_chained_gae, compute_gae, length_adaptive_lambda
from trainer.rows import place_episode_rewards


def reference_episode_gae(rows, gamma, lams, bootstrap):
    """``rows`` = [(rewards, values, mask)] of one episode in sub-trajectory order; one lambda per row.
    The definition, token by token: one sequence of the episode's action tokens."""
    advantages = [[0.0] * len(mask) for _, _, mask in rows]
    next_value, next_adv = bootstrap, 0.0
    sequence = [(r, t) for r, (_, _, mask) in enumerate(rows) for t in range(len(mask)) if mask[t]]
    for r, t in reversed(sequence):
        rewards, values, _ = rows[r]
        delta = rewards[t] + gamma * next_value - values[t]
        next_adv = delta + gamma * lams[r] * next_adv
        advantages[r][t] = next_adv
        next_value = values[t]
    return advantages


def random_batch(seed: int, n_episodes: int = 5, width: int = 14):
    """Episodes of 1-4 rows (uneven, prompt tokens first, gaps of tool tokens), rows shuffled."""
    rng = random.Random(seed)
    rows = []  # (episode, sub, is_last, rewards, values, mask)
    for episode in range(n_episodes):
        n_rows = rng.randint(1, 4)
        for sub in range(n_rows):
            length = rng.randint(4, width)
            mask = [0, 0] + [int(rng.random() < 0.6) for _ in range(length - 2)]
            mask[rng.randrange(2, length)] = 1  # at least one action token per row
            rewards = [rng.gauss(0, 1) if m else 9.0 for m in mask]  # rewards off the mask ignored
            values = [rng.gauss(0, 1) for _ in mask]
            rows.append((episode * 10 + 3, sub, sub == n_rows - 1, rewards, values, mask))
    rng.shuffle(rows)

    def pad(xs, fill):
        return xs + [fill] * (width - len(xs))

    return dict(
        rows=rows,
        episode_ids=torch.tensor([r[0] for r in rows]),
        sub_index=torch.tensor([r[1] for r in rows]),
        is_last=torch.tensor([r[2] for r in rows]),
        rewards=torch.tensor([pad(r[3], 0.0) for r in rows], dtype=torch.float64),
        values=torch.tensor([pad(r[4], 0.0) for r in rows], dtype=torch.float64),
        mask=torch.tensor([pad(r[5], 0) for r in rows]),
        bootstrap=torch.tensor([rng.gauss(0, 1) for _ in rows], dtype=torch.float64),
    )


def episode_rows(case, episode):
    """Row indices of ``episode`` in sub-trajectory order."""
    members = [i for i, r in enumerate(case["rows"]) if r[0] == episode]
    return sorted(members, key=lambda i: case["rows"][i][1])


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize(("gamma", "lam"), [(1.0, 1.0), (1.0, 0.95), (0.99, 0.9), (0.9, 0.0)])
def test_chained_gae_matches_the_per_token_definition(seed, gamma, lam) -> None:
    case = random_batch(seed)
    adv, ret = compute_chained_gae(
        case["rewards"], case["values"], case["mask"], case["episode_ids"], case["sub_index"],
        case["is_last"], gamma, lam, case["bootstrap"],
    )  # fmt: skip
    expected = torch.zeros_like(adv)
    for episode in case["episode_ids"].unique().tolist():
        members = episode_rows(case, episode)
        rows = [tuple(case["rows"][i][3:]) for i in members]
        boot = float(case["bootstrap"][members[-1]])
        for i, row_adv in zip(
            members, reference_episode_gae(rows, gamma, [lam] * len(rows), boot), strict=True
        ):
            expected[i, : len(row_adv)] = torch.tensor(row_adv, dtype=torch.float64)
    torch.testing.assert_close(adv, expected, rtol=0, atol=1e-12)
    torch.testing.assert_close(ret, (expected + case["values"]) * case["mask"], rtol=0, atol=1e-12)
    assert (adv[case["mask"] == 0] == 0).all()


@pytest.mark.parametrize("seed", range(8))
def test_chained_gae_equals_the_uncompacted_episode(seed) -> None:
    """The same tokens, rewards and values as one row (the episode before compaction) give the same
    advantages: compaction changes the context, not the credit."""
    case = random_batch(seed)
    adv, _ = compute_chained_gae(
        case["rewards"], case["values"], case["mask"], case["episode_ids"], case["sub_index"],
        case["is_last"], 1.0, 0.95, case["bootstrap"],
    )  # fmt: skip
    for episode in case["episode_ids"].unique().tolist():
        members = episode_rows(case, episode)
        lengths = [len(case["rows"][i][5]) for i in members]
        whole = [torch.cat([case[k][i, :n] for i, n in zip(members, lengths, strict=True)]) for k in
                 ("rewards", "values", "mask")]  # fmt: skip
        boot = case["bootstrap"][members[-1]].reshape(1)
        whole_adv, _ = compute_gae(whole[0][None], whole[1][None], whole[2][None], 1.0, 0.95, boot)
        split = torch.cat([adv[i, :n] for i, n in zip(members, lengths, strict=True)])
        torch.testing.assert_close(split, whole_adv[0], rtol=0, atol=1e-12)


@pytest.mark.parametrize("seed", range(6))
def test_lambda_one_returns_are_the_monte_carlo_returns_whatever_the_critic(seed) -> None:
    """``critic_lam = 1``: the value targets are the discounted rewards-to-go of the whole episode
    (reward chained over every compaction), however wrong the critic: gae_vs_mc_error = 0."""
    case = random_batch(seed)
    gamma = 0.97
    _, ret = compute_chained_gae(
        case["rewards"], case["values"], case["mask"], case["episode_ids"], case["sub_index"],
        case["is_last"], gamma, 1.0,
    )  # fmt: skip
    for episode in case["episode_ids"].unique().tolist():
        running = 0.0
        for i in reversed(episode_rows(case, episode)):
            for t in reversed(range(case["mask"].shape[1])):
                if case["mask"][i, t]:
                    running = float(case["rewards"][i, t]) + gamma * running
                    assert abs(float(ret[i, t]) - running) <= 1e-12


def test_an_imperfect_critic_no_longer_stops_credit_at_compaction() -> None:
    """The issue's example: three sub-trajectories, reward 1 at the end, a critic reading 0.2
    everywhere. Per-row bootstrapping gives every token before a compaction advantage 0 even at
    lambda 1; the chained trace gives 0.8, the Monte-Carlo value."""
    mask = torch.tensor([[0, 1, 1, 0, 1], [0, 0, 1, 1, 0], [0, 1, 0, 1, 1]])
    episode, sub, last = torch.zeros(3, dtype=torch.long), torch.arange(3), torch.tensor([False, False, True])
    rewards = place_episode_rewards(mask, torch.tensor([0.0, 0.0, 1.0]), last)
    values = torch.full((3, 5), 0.2) * mask
    batch = AdvantageBatch(rewards, mask, episode, episode, sub, last, torch.zeros(3, dtype=torch.bool),
                           values, torch.zeros(3))  # fmt: skip
    per_row, _ = gae_estimator(batch, AdvantageConfig(lam=1.0, chain_subtrajectories=False))
    chained, returns = gae_estimator(batch, AdvantageConfig(lam=1.0))
    first_two = mask.bool() & (sub < 2).unsqueeze(1)
    assert torch.all(per_row[first_two] == 0)
    torch.testing.assert_close(chained[mask.bool()], torch.full((8,), 0.8))
    torch.testing.assert_close(returns[mask.bool()], torch.ones(8))


def test_decoupled_lambda_actor_and_critic() -> None:
    """Advantages follow the actor's lambda, returns (value targets) the critic's."""
    case = random_batch(4)
    batch = AdvantageBatch(
        case["rewards"], case["mask"], case["episode_ids"], case["episode_ids"], case["sub_index"],
        case["is_last"], torch.zeros(len(case["rows"]), dtype=torch.bool), case["values"],
        torch.zeros(len(case["rows"]), dtype=torch.float64),
    )  # fmt: skip
    adv, ret = gae_estimator(batch, AdvantageConfig(gamma=0.99, lam=0.9, critic_lam=1.0))
    args = (
        case["rewards"],
        case["values"],
        case["mask"],
        case["episode_ids"],
        case["sub_index"],
        case["is_last"],
    )
    actor, _ = compute_chained_gae(*args, 0.99, 0.9)
    _, critic = compute_chained_gae(*args, 0.99, 1.0)
    torch.testing.assert_close(adv, actor, rtol=0, atol=0)
    torch.testing.assert_close(ret, critic, rtol=0, atol=0)


def test_length_adaptive_lambda_per_episode() -> None:
    case = random_batch(7)
    alpha = 0.3
    lam = length_adaptive_lambda(case["mask"], case["episode_ids"], alpha)
    for episode in case["episode_ids"].unique().tolist():
        members = episode_rows(case, episode)
        length = sum(int(case["mask"][i].sum()) for i in members)
        for i in members:
            assert float(lam[i]) == pytest.approx(max(0.0, 1 - 1 / (alpha * length)), abs=1e-12)
    batch = AdvantageBatch(
        case["rewards"], case["mask"], case["episode_ids"], case["episode_ids"], case["sub_index"],
        case["is_last"], torch.zeros(len(case["rows"]), dtype=torch.bool), case["values"], None,
    )  # fmt: skip
    adv, _ = gae_estimator(batch, AdvantageConfig(lam_length_alpha=alpha))
    for episode in case["episode_ids"].unique().tolist():
        members = episode_rows(case, episode)
        rows = [tuple(case["rows"][i][3:]) for i in members]
        ref = reference_episode_gae(rows, 1.0, [float(lam[i]) for i in members], 0.0)
        for i, row_adv in zip(members, ref, strict=True):
            torch.testing.assert_close(adv[i, : len(row_adv)], torch.tensor(row_adv, dtype=torch.float64))


def test_limit_endings_are_terminal_unless_bootstrap_is_asked_and_then_the_reward_is_dropped() -> None:
    mask = torch.tensor([[0, 1, 1]])
    one = torch.ones(1, dtype=torch.bool)
    values, final = torch.tensor([[0.0, 0.3, 0.4]]), torch.tensor([5.0])

    def run(bootstrap: bool):
        rewards = place_episode_rewards(mask, torch.tensor([1.0]), one, drop=one if bootstrap else None)
        batch = AdvantageBatch(rewards, mask, torch.zeros(1), torch.zeros(1), torch.zeros(1), one, one,
                               values, final)  # fmt: skip
        return gae_estimator(batch, AdvantageConfig(lam=1.0, bootstrap_truncated=bootstrap))

    _, terminal = run(False)
    torch.testing.assert_close(terminal, torch.tensor([[0.0, 1.0, 1.0]]))  # R, not R + V(final)
    _, bootstrapped = run(True)
    torch.testing.assert_close(bootstrapped, torch.tensor([[0.0, 5.0, 5.0]]))  # V(final), no reward


def test_a_missing_successor_is_refused() -> None:
    """A row that is not its episode's last, without its next row in the batch: the chain would stop
    there silently, so it is an error."""
    mask = torch.tensor([[0, 1, 1], [0, 1, 0]])
    values = torch.zeros(2, 3)
    with pytest.raises(ValueError, match=r"rows \[0\] .* next one is missing"):
        compute_chained_gae(values, values, mask, torch.tensor([4, 5]), torch.tensor([0, 2]),
                            torch.tensor([False, True]), 1.0, 1.0)  # fmt: skip


@pytest.mark.parametrize("lam", [0.0, 0.5, 1.0])
def test_first_decision_advantage_has_the_exact_q_minus_v_in_expectation(lam) -> None:
    """Monte-Carlo: episodes of 12 binary actions in 3 sub-trajectories (4 each); reward =
    a_0 + 0.25 * sum(a_1..a_11), each action 1 with probability p. With the exact critic
    V(s_t) = E[R | a_<t], E[A_0 | a_0] = Q(s_0, a_0) - V(s_0) = a_0 - p for every lambda, the
    trace crossing both compactions; checked on 4,000 sampled episodes within 4 standard errors."""
    p, n, c, per_row = 0.3, 12, 0.25, 4
    gen = torch.Generator().manual_seed(0)
    episodes = 4000
    actions = (torch.rand(episodes, n, generator=gen) < p).double()
    reward = actions[:, 0] + c * actions[:, 1:].sum(dim=1)
    exact = torch.zeros(episodes, n, dtype=torch.float64)
    for t in range(n):
        known = (actions[:, 0] if t > 0 else p) + c * actions[:, 1:t].sum(dim=1)
        exact[:, t] = known + c * p * (n - max(t, 1))
    width = per_row + 1  # one prompt token per row
    rows = episodes * (n // per_row)
    mask = torch.zeros(rows, width, dtype=torch.long)
    mask[:, 1:] = 1
    values = torch.zeros(rows, width, dtype=torch.float64)
    values[:, 1:] = exact.reshape(rows, per_row)
    episode_ids = torch.arange(episodes).repeat_interleave(n // per_row)
    sub = torch.arange(n // per_row).repeat(episodes)
    last = sub == n // per_row - 1
    rewards = place_episode_rewards(mask, reward.repeat_interleave(n // per_row), last)
    adv, _ = compute_chained_gae(rewards, values, mask, episode_ids, sub, last, 1.0, lam)
    first = adv[sub == 0, 1]
    for a0 in (0.0, 1.0):
        chosen = first[actions[:, 0] == a0]
        stderr = float(chosen.std()) / len(chosen) ** 0.5
        assert abs(float(chosen.mean()) - (a0 - p)) <= 4 * stderr + 1e-12, (a0, float(chosen.mean()))
