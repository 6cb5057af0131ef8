"""Run under ``torchrun --nproc_per_node 2`` by test_distributed.py: a few steps, then a checkpoint.

Usage: dist_worker.py MODEL_DIR OUT_DIR STEPS MODE... (modes: ddp, fsdp, and ddp-empty: rank 0 holds
every episode and rank 1 none, as when a step has fewer episodes than ranks; each writes OUT_DIR/MODE)
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import torch

from trainer.batch import Sample
from trainer.checkpoint import save_checkpoint
from trainer.data import shard_for_rank
from trainer.ppo import PPOTrainer
from trainer.runtime import init_runtime, shutdown_runtime
from trainer.settings import TrainerSettings


def fixed_samples(n_episodes: int, seed: int, vocab: int = 16) -> list[Sample]:
    """Deterministic two-part episodes of uneven length with random tokens and rewards."""
    gen = torch.Generator().manual_seed(seed)
    samples = []
    for episode in range(n_episodes):
        reward = float(torch.rand(1, generator=gen))
        for sub in range(2):
            length = int(torch.randint(5, 12, (1,), generator=gen))
            ids = torch.randint(2, vocab, (length,), generator=gen).tolist()
            mask = [0, 0, *torch.randint(0, 2, (length - 2,), generator=gen).tolist()]
            mask[-1] = 1
            logprobs = [-2.5 * m for m in mask]
            samples.append(
                Sample(ids, mask, logprobs, episode, sub, sub == 1, False, reward, episode // 2, 0)
            )
    return samples


def settings_for(parallel: str) -> TrainerSettings:
    return TrainerSettings(
        parallel=parallel,
        actor_lr=1e-2,
        critic_lr=1e-2,
        micro_batch_tokens=40,
        normalize_advantages=False,
        critic_warmup_steps=0,
        ppo_mini_batches=2,
    )


def main() -> None:
    model_dir, out_dir, steps = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
    runtime = None
    for mode in sys.argv[4:]:  # one process group, several wrappings: one start-up for all
        parallel = mode.removesuffix("-empty")
        runtime = replace(init_runtime("ddp", device="cpu"), parallel=parallel)
        trainer = PPOTrainer.from_pretrained(model_dir, settings_for(parallel), runtime)
        for step in range(steps):
            samples = fixed_samples(8, seed=step)
            if mode.endswith("-empty"):
                mine = samples if runtime.rank == 0 else []
            else:
                mine = shard_for_rank(samples, runtime.rank, runtime.world_size, by_group=False)
            trainer.train_step(mine)
        save_checkpoint(trainer, out_dir / mode)
    if runtime is not None:
        shutdown_runtime(runtime)


if __name__ == "__main__":
    main()
