"""PPO and the critic-free variants on a tiny model: reward rises; stale data gets TIS; warm-up."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from tests.trainer.conftest import two_part_episodes
from trainer.batch import collate
from trainer.models import Critic, token_logprobs
from trainer.ppo import PPOTrainer
from trainer.runtime import init_runtime
from trainer.settings import TrainerSettings


def fast_settings(**overrides) -> TrainerSettings:
    base = dict(
        actor_lr=3e-3,
        critic_lr=3e-3,
        ppo_epochs=4,
        micro_batch_tokens=64,
        clip_high=0.2,
        seed=0,
        critic_warmup_steps=0,
    )
    return TrainerSettings(**(base | overrides))


def mean_reward(samples) -> float:
    last = [s.reward for s in samples if s.is_last]
    return sum(last) / len(last)


def test_few_ppo_steps_raise_reward_on_trivial_task(tiny_model_dir) -> None:
    settings = fast_settings(actor_lr=2e-3, critic_lr=1e-2, micro_batch_tokens=512)
    trainer = PPOTrainer.from_pretrained(tiny_model_dir, settings, init_runtime(device="cpu"))
    before = mean_reward(two_part_episodes(trainer.actor, 64, seed=100))
    for step in range(8):
        batch = two_part_episodes(trainer.actor, 32, seed=step, version=trainer.policy_version)
        metrics = trainer.train_step(batch)
        assert all(v == v for v in metrics.values()), metrics  # no NaN
    after = mean_reward(two_part_episodes(trainer.actor, 64, seed=100))
    assert before < 0.1
    assert after > before + 0.1, (before, after)
    assert trainer.policy_version == 8


@pytest.mark.parametrize("algo", ["grpo", "rloo", "reinforce_pp"])
def test_critic_free_algorithms_step_without_a_critic(tiny_model_dir, algo) -> None:
    trainer = PPOTrainer.from_pretrained(tiny_model_dir, fast_settings(algo=algo), init_runtime(device="cpu"))
    assert trainer.critic is None
    before = [p.detach().clone() for p in trainer.actor.parameters()]
    batch = [
        replace(s, reward=1.0) if s.episode_id % 4 == 0 else s for s in two_part_episodes(trainer.actor, 8, 0)
    ]
    metrics = trainer.train_step(batch)
    assert "critic/value_loss" not in metrics and metrics["actor/grad_norm"] > 0
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.actor.parameters(), strict=True))


def test_metrics_name_each_term(tiny_model_dir) -> None:
    trainer = PPOTrainer.from_pretrained(
        tiny_model_dir,
        fast_settings(kl_coef=0.1, kl_in_reward=False, entropy_coef=0.01),
        init_runtime(device="cpu"),
    )
    metrics = trainer.train_step(two_part_episodes(trainer.actor, 4, seed=0))
    for key in (
        "actor/pg_loss",
        "actor/entropy",
        "actor/kl_loss",
        "actor/kl_ref",
        "actor/clip_fraction",
        "actor/approx_kl",
        "actor/grad_norm",
        "critic/value_loss",
        "critic/explained_variance",
        "critic/grad_norm",
        "perf/tokens_per_s",
    ):
        assert key in metrics, key
    assert metrics["data/episodes"] == 4 and metrics["data/sub_trajectories"] == 8


def test_critic_warmup_leaves_actor_untouched(tiny_model_dir) -> None:
    trainer = PPOTrainer.from_pretrained(
        tiny_model_dir,
        fast_settings(critic_warmup_steps=1, critic_updates_per_actor_update=2),
        init_runtime(device="cpu"),
    )
    actor_before = [p.detach().clone() for p in trainer.actor.parameters()]
    critic_before = [p.detach().clone() for p in trainer.critic.parameters()]
    batch = [
        replace(s, reward=1.0) if s.episode_id == 0 else s
        for s in two_part_episodes(trainer.actor, 4, seed=0)
    ]
    metrics = trainer.train_step(batch)
    assert "actor/pg_loss" not in metrics and trainer.policy_version == 0
    assert all(torch.equal(a, b) for a, b in zip(actor_before, trainer.actor.parameters(), strict=True))
    assert any(not torch.equal(a, b) for a, b in zip(critic_before, trainer.critic.parameters(), strict=True))
    trainer.train_step(two_part_episodes(trainer.actor, 4, seed=1))
    assert trainer.policy_version == 1


def test_every_token_is_anchored_to_the_proximal_policy_with_truncated_weights(tiny_model_dir) -> None:
    """Stale or fresh, PPO's ratio is taken against the trainer's own logprob of the token before the
    update (never the engine's), and the behaviour gap becomes a truncated importance weight."""
    trainer = PPOTrainer.from_pretrained(
        tiny_model_dir, fast_settings(tis_cap=1.5), init_runtime(device="cpu")
    )
    old = two_part_episodes(trainer.actor, 4, seed=0, version=0)
    trainer.train_step(two_part_episodes(trainer.actor, 4, seed=1, version=0))  # now at version 1
    fresh = two_part_episodes(trainer.actor, 2, seed=2, version=1, first_episode_id=10)
    fresh = [replace(x, logprobs=[lp - 0.3 * m for lp, m in zip(x.logprobs, x.action_mask, strict=True)])
             for x in fresh]  # an engine 0.3 nats less sure of each token than the trainer  # fmt: skip
    batch = old + fresh
    micro = [collate(batch, range(len(batch)), 0, 1)]
    scored = trainer._score(batch, micro, [])
    mb = micro[0]
    proximal, _ = token_logprobs(trainer.actor, mb.input_ids, mb.attention_mask)
    mask = scored.action_mask
    torch.testing.assert_close(scored.old_logprobs, proximal.detach() * mask)
    expected = torch.clamp(torch.exp(proximal.detach() - scored.rollout_logprobs), max=1.5)
    torch.testing.assert_close(scored.is_weights[mask.bool()], expected[mask.bool()])
    fresh_rows = mask[len(old) :].bool()
    torch.testing.assert_close(
        scored.is_weights[len(old) :][fresh_rows],
        torch.full((int(fresh_rows.sum()),), float(torch.exp(torch.tensor(0.3)))),
    )
    assert scored.metrics["mismatch/fresh_k3_kl"] == pytest.approx(
        float(torch.exp(torch.tensor(0.3)) - 0.3 - 1), rel=1e-5
    )


def test_critic_values_are_aligned_to_the_state_before_each_token(tiny_model_dir) -> None:
    critic = Critic.from_pretrained(tiny_model_dir)
    torch.nn.init.normal_(critic.value_head.weight)
    ids = torch.tensor([[2, 3, 7, 8, 0]])
    attention = torch.tensor([[1, 1, 1, 1, 0]])
    values, final = critic(ids, attention)
    prefix_values, prefix_final = critic(ids[:, :3], attention[:, :3])
    # V(x_<3) is the value at token 3 of the long row and the final value of the 3-token prefix
    torch.testing.assert_close(values[0, 3], prefix_final[0])
    torch.testing.assert_close(values[0, :3], prefix_values[0])
    assert values[0, 0] == 0 and final.shape == (1,)


def test_gradient_checkpointing_changes_memory_not_the_update(tiny_model_dir) -> None:
    batch_seed = 7
    results = []
    for checkpointing in (False, True):
        settings = fast_settings(gradient_checkpointing=checkpointing, ppo_epochs=1)
        trainer = PPOTrainer.from_pretrained(tiny_model_dir, settings, init_runtime(device="cpu"))
        assert trainer.actor.is_gradient_checkpointing == checkpointing
        assert trainer.critic.backbone.is_gradient_checkpointing == checkpointing
        trainer.train_step(two_part_episodes(trainer.actor, 4, seed=batch_seed))
        results.append([p.detach().clone() for p in trainer.actor.parameters()])
    for plain, checkpointed in zip(*results, strict=True):
        torch.testing.assert_close(plain, checkpointed)


def test_mini_batches_take_several_optimiser_steps_over_whole_episodes(tiny_model_dir) -> None:
    settings = fast_settings(ppo_epochs=2, ppo_mini_batches=3)
    trainer = PPOTrainer.from_pretrained(tiny_model_dir, settings, init_runtime(device="cpu"))
    batch = two_part_episodes(trainer.actor, 12, seed=0)
    minis = trainer._mini_batch_rows(batch)
    assert sorted(r for m in minis for r in m) == list(range(len(batch)))
    for rows in minis:
        episodes = {batch[r].episode_id for r in rows}
        assert rows and sorted(rows) == sorted(r for r, x in enumerate(batch) if x.episode_id in episodes)
    trainer.train_step(batch)
    for optimizer in (trainer.actor_optimizer, trainer.critic_optimizer):
        steps = {int(state["step"]) for state in optimizer.state.values()}
        assert steps == {6}  # 2 epochs x 3 mini-batches


def test_ppo_defaults_warm_the_critic_and_keep_kl_out_of_the_reward() -> None:
    assert TrainerSettings().warmup_steps() == 2 and TrainerSettings(algo="grpo").warmup_steps() == 0
    assert TrainerSettings(critic_warmup_steps=0).warmup_steps() == 0
    defaults = TrainerSettings()
    assert not defaults.kl_in_reward and defaults.critic_lam == 1.0 and defaults.stale_mode == "mask"
    assert not defaults.bootstrap_truncated and defaults.chain_subtrajectories


@pytest.mark.parametrize("bootstrap", [False, True])
def test_a_limit_ending_keeps_its_reward_unless_bootstrapped(tiny_model_dir, bootstrap) -> None:
    trainer = PPOTrainer.from_pretrained(
        tiny_model_dir, fast_settings(bootstrap_truncated=bootstrap), init_runtime(device="cpu")
    )
    batch = [replace(x, truncated=True, reward=1.0) for x in two_part_episodes(trainer.actor, 2, seed=0)]
    micro = [collate(batch, range(len(batch)), 0, 0)]
    scored = trainer._score(batch, micro, [])
    _, returns, token_rewards = trainer._advantages(batch, scored)
    mask = scored.action_mask.bool()
    if bootstrap:  # no graded reward; the target after the last token is V(final state)
        assert float(token_rewards.abs().sum()) == 0
        last = [i for i, x in enumerate(batch) if x.is_last]
        end = [int(mask[i].nonzero().max()) for i in last]
        for i, t in zip(last, end, strict=True):
            assert float(returns[i, t]) == pytest.approx(float(scored.final_values[i]), abs=1e-6)
    else:  # terminal: critic lambda 1 makes every return the episode's reward, exactly
        torch.testing.assert_close(returns[mask], torch.ones(int(mask.sum())))
