"""On-policy distillation on the learning environment: a fresh student learns an expert's skill fast."""

from __future__ import annotations

import torch
from torch import nn

from trainer.bench.distill_bench import DistillParams, distill, exact_reverse_kl, measure
from trainer.bench.synthetic_env import FIRST_KEY, HORIZONS, rollout, sample_tasks


class KeyOracle(nn.Module):
    """An expert without training: writes the last key token it has seen in the row (the key itself,
    or the summary that carries it), and has no preference among work tokens."""

    def __init__(self, num_keys: int, vocab: int) -> None:
        super().__init__()
        self.num_keys, self.vocab = num_keys, vocab

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        is_key = (tokens >= FIRST_KEY) & (tokens < FIRST_KEY + self.num_keys)
        positions = torch.arange(tokens.shape[1]).expand_as(tokens)
        last = torch.where(is_key, positions, -1).cummax(dim=1).values
        seen = tokens.gather(1, last.clamp(min=0))
        logits = torch.zeros(*tokens.shape, self.vocab)
        hot = nn.functional.one_hot(seen, self.vocab).float() * 6.0
        return torch.where((last >= 0).unsqueeze(-1), logits + hot, logits)


def test_student_distilled_from_an_expert_reaches_its_success_and_kl_falls() -> None:
    config = HORIZONS["short"]
    expert = KeyOracle(config.num_keys, config.vocab_size)
    teachers = {"short": expert}
    params = DistillParams(groups=("short",), distill_budget=8_000, tasks_per_group=64, eval_episodes=128)
    torch.manual_seed(params.student_seed)
    generator = torch.Generator().manual_seed(5)
    expert_success = float(rollout(expert_as_policy(expert), sample_tasks(config, 256, generator), config,
                                   generator).rewards.mean())  # fmt: skip
    from trainer.bench.learn_bench import GRUNet, HyperParams

    hp = HyperParams()
    fresh = GRUNet(config.vocab_size, config.vocab_size, hp.embed, hp.hidden)
    torch.manual_seed(params.student_seed)
    before = measure(fresh, teachers, params.eval_episodes, 1)
    student, curve = distill(teachers, params)
    after = measure(student, teachers, params.eval_episodes, 1)
    assert expert_success > 0.95
    assert before["success"]["short"] < 0.4
    assert after["success"]["short"] >= 0.9 * expert_success, (before, after)
    assert after["reverse_kl"]["short"] < before["reverse_kl"]["short"] / 5, (before, after)
    assert curve[-1]["env_tokens"] >= params.distill_budget


def expert_as_policy(expert: KeyOracle):
    """The oracle as a step policy for ``rollout`` (its state is the row so far)."""

    class Stepper:
        def initial(self, batch: int) -> torch.Tensor:
            return torch.zeros(batch, 0, dtype=torch.long)

        def step(self, tokens: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            state = torch.cat([state, tokens.unsqueeze(1)], dim=1)
            return expert(state)[:, -1], state

    return Stepper()


def test_exact_reverse_kl_is_zero_against_itself() -> None:
    config = HORIZONS["short"]
    expert = KeyOracle(config.num_keys, config.vocab_size)
    generator = torch.Generator().manual_seed(0)
    ro = rollout(expert_as_policy(expert), sample_tasks(config, 16, generator), config, generator)
    assert abs(exact_reverse_kl(expert, expert, ro, config)) < 1e-6
