"""``rlguard bench train``: trainer step time against a plain forward+backward of the same models.

For each model config, on one fixed batch of sub-trajectories: the full PPO step (critic scoring
pass, GAE, critic update, actor update, both optimiser steps) and, in the same process on the same
batch, a bare forward+backward of the actor (token log-likelihood) and of the critic (squared
value). ``step_vs_raw_fwd_bwd`` is their time ratio: what the trainer costs beyond the unavoidable
compute (target <= 1.3).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from trainer.batch import Sample
from trainer.models import Critic, token_logprobs
from trainer.ppo import PPOTrainer
from trainer.runtime import Runtime, init_runtime
from trainer.settings import TrainerSettings


@dataclass(frozen=True)
class BenchConfig:
    name: str
    hidden: int
    layers: int
    heads: int
    intermediate: int
    vocab: int
    rows: int
    row_tokens: int
    steps: int


CONFIGS = {
    "tiny": BenchConfig("tiny", 64, 2, 4, 128, 3072, rows=16, row_tokens=256, steps=8),
    "100m": BenchConfig("100m", 768, 12, 12, 2048, 32000, rows=4, row_tokens=256, steps=3),
}


def build_model_dir(config: BenchConfig, directory: Path) -> Path:
    """A Qwen2-architecture model of ``config``'s size with seeded random weights."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    hf = Qwen2Config(
        vocab_size=config.vocab,
        hidden_size=config.hidden,
        intermediate_size=config.intermediate,
        num_hidden_layers=config.layers,
        num_attention_heads=config.heads,
        num_key_value_heads=config.heads,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        pad_token_id=0,
        eos_token_id=1,
    )
    torch.manual_seed(0)
    Qwen2ForCausalLM(hf).save_pretrained(directory, safe_serialization=True)
    return directory


def bench_samples(config: BenchConfig, policy_version: int, seed: int = 0) -> list[Sample]:
    """Episodes of two equal-length sub-trajectories: a prompt, then alternating action/tool spans.

    They carry the trainer's current ``policy_version`` (fresh, on-policy data, as in the loop), so
    the step does not re-score them with the actor as it would stale data.
    """
    gen = torch.Generator().manual_seed(seed)
    samples = []
    span = max(config.row_tokens // 8, 1)
    mask = [0] * span + [(i // span) % 2 for i in range(config.row_tokens - span)]
    for row in range(config.rows):
        ids = torch.randint(2, config.vocab, (config.row_tokens,), generator=gen).tolist()
        logprobs = [-float(torch.rand(1, generator=gen)) * 5 * m for m in mask]
        episode, sub = divmod(row, 2)
        reward = float(episode % 2)
        samples.append(Sample(ids, mask, logprobs, episode, sub, sub == 1, False, reward, 0, policy_version))
    return samples


def _sync(runtime: Runtime) -> None:
    if runtime.device.type == "cuda":
        torch.cuda.synchronize()


def raw_forward_backward(trainer: PPOTrainer, samples: list[Sample]) -> float:
    """Seconds for one bare forward+backward of the actor and the critic on ``samples``."""
    runtime = trainer.runtime
    ids = torch.tensor([list(s.input_ids) for s in samples], device=runtime.device)
    attention = torch.ones_like(ids)
    mask = torch.tensor([list(s.action_mask) for s in samples], device=runtime.device, dtype=torch.float32)
    _sync(runtime)
    started = time.perf_counter()
    with runtime.autocast():
        logprobs, _ = token_logprobs(trainer.actor, ids, attention)
    (-(logprobs * mask).sum() / mask.sum()).backward()
    assert isinstance(trainer.critic, Critic)
    with runtime.autocast():
        values, _ = trainer.critic(ids, attention)
    ((values * mask) ** 2).sum().div(mask.sum()).backward()
    _sync(runtime)
    elapsed = time.perf_counter() - started
    trainer.actor.zero_grad(set_to_none=True)
    trainer.critic.zero_grad(set_to_none=True)
    return elapsed


def bench_config(config: BenchConfig, device: str | None = None) -> dict[str, Any]:
    runtime = init_runtime("ddp", device=device)
    with tempfile.TemporaryDirectory(prefix=f"rlguard-bench-{config.name}-") as tmp:
        model_dir = build_model_dir(config, Path(tmp))
        settings = TrainerSettings(
            algo="ppo", micro_batch_tokens=config.rows * config.row_tokens, actor_lr=1e-6, critic_lr=1e-6
        )
        trainer = PPOTrainer.from_pretrained(model_dir, settings, runtime)
    tokens = config.rows * config.row_tokens
    params = sum(p.numel() for p in trainer.actor.parameters())
    # warm-up (allocator, kernels), then alternate so background load hits both alike
    trainer.train_step(bench_samples(config, trainer.policy_version))
    raw_forward_backward(trainer, bench_samples(config, trainer.policy_version))
    step_times, raw_times = [], []
    for _ in range(config.steps):
        samples = bench_samples(config, trainer.policy_version)
        _sync(runtime)
        started = time.perf_counter()
        trainer.train_step(samples)
        _sync(runtime)
        step_times.append(time.perf_counter() - started)
        raw_times.append(raw_forward_backward(trainer, samples))
    # each step is timed right beside a raw pass, so background load hits a pair alike: the median
    # of the paired ratios is far steadier on a shared machine than a ratio of separate statistics
    ratios = sorted(s / r for s, r in zip(step_times, raw_times, strict=True))
    step_s, raw_s = statistics.median(step_times), statistics.median(raw_times)
    return {
        "actor_parameters": params,
        "device": str(runtime.device),
        "batch_tokens": tokens,
        "steps_timed": config.steps,
        "step_s": step_s,
        "raw_fwd_bwd_s": raw_s,
        "tokens_per_s": tokens / step_s,
        "raw_tokens_per_s": tokens / raw_s,
        "step_vs_raw_fwd_bwd": statistics.median(ratios),
    }


def run_train_bench(configs: list[str], device: str | None = None) -> dict[str, Any]:
    """Every config in ``configs``; the headline keys come from the largest one run."""
    unknown = [c for c in configs if c not in CONFIGS]
    if unknown:
        raise ValueError(f"unknown bench config(s) {unknown}; known: {sorted(CONFIGS)}")
    details = {name: bench_config(CONFIGS[name], device) for name in configs}
    headline = details[configs[-1]]
    return {
        "tokens_per_s": headline["tokens_per_s"],
        "step_vs_raw_fwd_bwd": headline["step_vs_raw_fwd_bwd"],
        "headline_config": configs[-1],
        "configs": details,
    }
