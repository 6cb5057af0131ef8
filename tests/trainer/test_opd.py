"""On-policy distillation: the advantage math as pure functions, teacher routing, learning on a tiny LM."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from tests.trainer.conftest import TARGET, build_tiny_model, two_part_episodes
from trainer.advantages import ALGORITHMS, AdvantageBatch, AdvantageConfig
from trainer.critic_free import compute_grpo_advantages, compute_opd_advantages, reverse_kl
from trainer.models import token_logprobs
from trainer.ppo import PPOTrainer
from trainer.runtime import init_runtime
from trainer.settings import TrainerSettings

MASK = torch.tensor([[0, 1, 1, 0, 1], [0, 0, 1, 1, 0]], dtype=torch.float32)
STUDENT = torch.tensor([[0.0, -1.0, -2.0, 0.0, -0.5], [0.0, 0.0, -3.0, -0.1, 0.0]])
TEACHER = torch.tensor([[-9.0, -0.5, -4.0, -7.0, -0.5], [-1.0, -2.0, -1.0, -2.3, -5.0]])


def _batch(rewards=(1.0, 0.0)) -> AdvantageBatch:
    token_rewards = torch.zeros_like(MASK)
    token_rewards[0, 4], token_rewards[1, 3] = rewards
    return AdvantageBatch(
        token_rewards=token_rewards,
        action_mask=MASK,
        episode_ids=torch.tensor([0, 1]),
        group_ids=torch.tensor([0, 0]),
        sub_index=torch.tensor([0, 0]),
        is_last=torch.tensor([True, True]),
        truncated=torch.tensor([False, False]),
        student_logprobs=STUDENT,
        teacher_logprobs=TEACHER,
    )


def test_opd_advantage_is_teacher_minus_student_logprob_on_action_tokens_only() -> None:
    advantages, returns = compute_opd_advantages(STUDENT, TEACHER, MASK)
    expected = torch.tensor([[0.0, 0.5, -2.0, 0.0, 0.0], [0.0, 0.0, 2.0, -2.2, 0.0]])
    torch.testing.assert_close(advantages, expected)
    torch.testing.assert_close(returns, expected)
    # each token is its own return: changing a later token's logprobs leaves earlier advantages alone
    later = TEACHER.clone()
    later[0, 4] = -30.0
    torch.testing.assert_close(compute_opd_advantages(STUDENT, later, MASK)[0][0, :4], expected[0, :4])


def test_reverse_kl_is_the_mean_negated_advantage_over_action_tokens() -> None:
    advantages, _ = compute_opd_advantages(STUDENT, TEACHER, MASK)
    assert reverse_kl(STUDENT, TEACHER, MASK) == pytest.approx(float(-advantages.sum() / MASK.sum()))
    assert reverse_kl(TEACHER, TEACHER, MASK) == 0.0
    assert reverse_kl(STUDENT, TEACHER, torch.zeros_like(MASK)) == 0.0


def test_opd_is_registered_for_its_algo_and_mixes_the_task_reward_by_weight() -> None:
    opd = ALGORITHMS.get("opd").estimate
    pure, _ = opd(_batch(), AdvantageConfig())
    torch.testing.assert_close(pure, compute_opd_advantages(STUDENT, TEACHER, MASK)[0])
    mixed, _ = opd(_batch(), AdvantageConfig(reward_weight=0.5))
    task, _ = compute_grpo_advantages(
        _batch().token_rewards, MASK, torch.tensor([0, 1]), torch.tensor([0, 0])
    )
    torch.testing.assert_close(mixed, pure + 0.5 * task)
    with pytest.raises(ValueError, match="teacher_logprobs"):
        opd(replace(_batch(), teacher_logprobs=None), AdvantageConfig())
    with pytest.raises(ValueError, match="does not match"):
        compute_opd_advantages(STUDENT[:, :3], TEACHER, MASK)


@pytest.fixture(scope="module")
def target_teacher(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny LM taught (cross-entropy, a few steps) to write TARGET after any prefix."""
    from transformers import AutoModelForCausalLM

    directory = build_tiny_model(tmp_path_factory.mktemp("teacher"), seed=7)
    model = AutoModelForCausalLM.from_pretrained(directory)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(0)
    for _ in range(60):
        prefix = torch.randint(2, 16, (16, 6), generator=gen)
        logits = model(input_ids=prefix).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 16), torch.full((16 * 6,), TARGET))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.save_pretrained(directory)
    return directory


def opd_settings(teachers: dict[str, str], routes: dict[str, str] | None = None) -> TrainerSettings:
    return TrainerSettings(
        algo="opd", teachers=teachers, routes=routes or {}, actor_lr=3e-3, ppo_epochs=2,
        micro_batch_tokens=128, clip_high=0.2, seed=0,
    )  # fmt: skip


def test_teachers_are_routed_by_task_group(tiny_model_dir: Path, target_teacher: Path) -> None:
    settings = opd_settings(
        {"a": str(target_teacher), "b": str(tiny_model_dir)}, {"suite-a": "a", "suite-b": "b"}
    )
    trainer = PPOTrainer.from_pretrained(tiny_model_dir, settings, init_runtime(device="cpu"))
    assert trainer.teacher_for("suite-a") == "a" and trainer.teacher_for("suite-b") == "b"
    with pytest.raises(ValueError, match="no teacher routed for task group 'other'"):
        trainer.teacher_for("other")
    samples = [
        replace(s, task_group="suite-a" if s.episode_id % 2 else "suite-b")
        for s in two_part_episodes(trainer.actor, 4, seed=0)
    ]
    metrics = trainer.train_step(samples)
    assert metrics["opd/reverse_kl"] == metrics["opd/reverse_kl"] and "critic/value_loss" not in metrics
    with pytest.raises(ValueError, match="unknown teachers"):
        PPOTrainer.from_pretrained(
            tiny_model_dir, opd_settings({"a": str(target_teacher)}, {"x": "zz"}), init_runtime(device="cpu")
        )
    with pytest.raises(ValueError, match="needs at least one teacher"):
        PPOTrainer.from_pretrained(tiny_model_dir, opd_settings({}), init_runtime(device="cpu"))


def test_routed_rows_are_scored_by_their_own_teacher(tiny_model_dir: Path, target_teacher: Path) -> None:
    settings = opd_settings({"a": str(target_teacher), "b": str(tiny_model_dir)}, {"ga": "a", "gb": "b"})
    trainer = PPOTrainer.from_pretrained(tiny_model_dir, settings, init_runtime(device="cpu"))
    samples = [
        replace(s, task_group="ga" if s.episode_id == 0 else "gb")
        for s in two_part_episodes(trainer.actor, 2, 0)
    ]
    from trainer.batch import collate

    micro = [collate(samples, list(range(len(samples))), trainer.pad_id, trainer.policy_version)]
    scored = trainer._score(samples, micro, [])
    for row, sample in enumerate(samples):
        teacher = trainer.teachers["a" if sample.task_group == "ga" else "b"]
        ids = torch.tensor([list(sample.input_ids)])
        expected, _ = token_logprobs(teacher, ids, torch.ones_like(ids))
        width = len(sample.input_ids)
        torch.testing.assert_close(scored.teacher_logprobs[row, :width], expected[0].float())


def test_distillation_pulls_the_student_to_the_teacher(tiny_model_dir: Path, target_teacher: Path) -> None:
    """A few opd steps on the student's own samples: reverse KL falls, the teacher's token takes over."""
    trainer = PPOTrainer.from_pretrained(
        tiny_model_dir, opd_settings({"t": str(target_teacher)}), init_runtime(device="cpu")
    )

    def share_of_target() -> float:
        held_out = two_part_episodes(trainer.actor, 64, seed=100)
        return sum(s.reward for s in held_out if s.is_last) / 64

    before = share_of_target()
    kls = []
    for step in range(8):
        batch = two_part_episodes(trainer.actor, 32, seed=step, version=trainer.policy_version)
        kls.append(trainer.train_step([replace(s, task_group="builtin") for s in batch])["opd/reverse_kl"])
    after = share_of_target()
    assert before < 0.15 and after > before + 0.3, (before, after)
    assert kls[-1] < 0.75 * kls[0], kls  # a very sharp teacher: ~8 nats to start


def test_teacher_and_route_options_are_parsed_with_clear_errors(target_teacher: Path) -> None:
    from rlguard.cli.train import parse_pairs, teacher_settings
    from trainer.errors import TrainerError

    assert parse_pairs(["a=x", " b = y "], "--teacher") == {"a": "x", "b": "y"}
    for bad in (["a"], ["=x"], ["a="], ["a=x", "a=y"]):
        with pytest.raises(TrainerError, match="--teacher"):
            parse_pairs(bad, "--teacher")
    values = teacher_settings([f"t={target_teacher}"], ["builtin=t"], 0.5)
    assert values == {
        "teachers": {"t": str(target_teacher)},
        "routes": {"builtin": "t"},
        "reward_weight": 0.5,
    }
    with pytest.raises(TrainerError, match="unknown teachers"):
        teacher_settings([f"t={target_teacher}"], ["builtin=u"], None)
