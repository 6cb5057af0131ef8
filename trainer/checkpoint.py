"""Checkpoints: the policy in HF format (what the policy server loads) plus exact-resume state.

Layout of one checkpoint directory::

    actor/               HF causal LM (config, safetensors, tokenizer files copied from the base)
    critic/              HF backbone + value_head.safetensors (absent for critic-free algorithms)
    trainer_state.pt     step, policy version, both optimisers, every rank's RNG state

A checkpoint is written to a hidden temporary directory and renamed into place, so a crash never
leaves a half-written one under its final name. Full (unsharded) state dicts are gathered with
``torch.distributed.checkpoint.state_dict``, which works the same for a plain module, DDP and FSDP2.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_optimizer_state_dict,
)

from trainer.models import Critic
from trainer.ppo import PPOTrainer
from trainer.runtime import Runtime, rng_state, set_rng_state, unwrap
from trainer.settings import TrainerSettings

STATE_FILE = "trainer_state.pt"
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
    "tiny_model.json",
)
_FULL = StateDictOptions(full_state_dict=True, cpu_offload=True)


def copy_tokenizer_files(source: Path, target: Path) -> None:
    """The policy server needs the tokenizer beside the weights; training never changes it."""
    for name in TOKENIZER_FILES:
        if (source / name).is_file():
            shutil.copy2(source / name, target / name)


def save_checkpoint(trainer: PPOTrainer, directory: Path, tokenizer_source: Path | None = None) -> Path:
    """Write ``directory`` (all ranks call this; rank 0 writes). Returns the directory."""
    directory = Path(directory)
    runtime = trainer.runtime
    actor_state = get_model_state_dict(trainer.actor, options=_FULL)
    actor_optim = get_optimizer_state_dict(trainer.actor, trainer.actor_optimizer, options=_FULL)
    critic_state = critic_optim = None
    if trainer.critic is not None and trainer.critic_optimizer is not None:
        critic_state = get_model_state_dict(trainer.critic, options=_FULL)
        critic_optim = get_optimizer_state_dict(trainer.critic, trainer.critic_optimizer, options=_FULL)
    rng_states = _gather_rng(runtime)
    if runtime.is_main:
        tmp = directory.parent / f".{directory.name}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        unwrap(trainer.actor).save_pretrained(tmp / "actor", state_dict=actor_state, safe_serialization=True)
        if tokenizer_source is not None:
            copy_tokenizer_files(Path(tokenizer_source), tmp / "actor")
        if critic_state is not None:
            critic = unwrap(trainer.critic)
            assert isinstance(critic, Critic)
            critic.save_pretrained(tmp / "critic", state_dict=critic_state)
        state: dict[str, Any] = {
            "step": trainer.step,
            "policy_version": trainer.policy_version,
            "actor_optimizer": actor_optim,
            "critic_optimizer": critic_optim,
            "rng": rng_states,
            "settings": trainer.settings.model_dump(),
        }
        torch.save(state, tmp / STATE_FILE)
        if directory.exists():
            shutil.rmtree(directory)
        os.replace(tmp, directory)
    runtime.barrier()
    return directory


def load_checkpoint(
    directory: Path,
    settings: TrainerSettings,
    runtime: Runtime,
    reference_path: str | Path | None = None,
) -> PPOTrainer:
    """A trainer exactly as it was when ``directory`` was saved (weights, optimisers, RNG, counters)."""
    directory = Path(directory)
    state = torch.load(directory / STATE_FILE, map_location="cpu", weights_only=False)
    critic_dir = directory / "critic"
    trainer = PPOTrainer.from_pretrained(
        directory / "actor",
        settings,
        runtime,
        critic_path=critic_dir if critic_dir.is_dir() else None,
        reference_path=reference_path,
    )
    set_optimizer_state_dict(trainer.actor, trainer.actor_optimizer, state["actor_optimizer"], options=_FULL)
    if trainer.critic is not None and state["critic_optimizer"] is not None:
        set_optimizer_state_dict(
            trainer.critic, trainer.critic_optimizer, state["critic_optimizer"], options=_FULL
        )
    trainer.step = int(state["step"])
    trainer.policy_version = int(state["policy_version"])
    rngs = state["rng"]
    set_rng_state(rngs[runtime.rank] if runtime.rank < len(rngs) else rngs[0])
    return trainer


def _gather_rng(runtime: Runtime) -> list[dict[str, Any]]:
    mine = rng_state()
    if not runtime.distributed:
        return [mine]
    gathered: list[Any] = [None] * runtime.world_size
    dist.all_gather_object(gathered, mine)
    return gathered
