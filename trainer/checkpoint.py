"""Checkpoints: the policy in HF format (what the policy server loads) plus exact-resume state.

Layout of one checkpoint directory::

    actor/               HF causal LM (config, safetensors, tokenizer files copied from the base)
    critic/              HF backbone + value_head.safetensors (absent for critic-free algorithms)
    trainer_state.pt     step, policy version, both optimisers, every rank's RNG state

``trainer_state.pt`` holds only tensors and plain data (numbers, strings, lists, dicts; the settings
as JSON; the RNG states as tensors) and is read with ``torch.load(weights_only=True)``: a checkpoint
folder someone else could write into never gets to run code through a pickle when a run resumes.
Checkpoints of earlier releases (NumPy's RNG state as an array) load too, with NumPy's array
reconstruction allowed and nothing else.

A checkpoint is written to a hidden temporary directory and renamed into place, so a crash never
leaves a half-written one under its final name. Full (unsharded) state dicts are gathered with
``torch.distributed.checkpoint.state_dict``, which works the same for a plain module, DDP and FSDP2.
"""

from __future__ import annotations

import importlib
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_optimizer_state_dict,
)

from trainer.errors import TrainerError
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
            "rng": [plain_rng_state(state) for state in rng_states],
            "settings": trainer.settings.model_dump(mode="json"),
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
    state = read_trainer_state(directory / STATE_FILE)
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
    set_rng_state(rng_state_from_plain(rngs[runtime.rank] if runtime.rank < len(rngs) else rngs[0]))
    return trainer


def read_trainer_state(path: Path) -> dict[str, Any]:
    """``trainer_state.pt`` through ``weights_only`` unpickling: tensors and plain data only.

    A refusal (a planted pickle, a foreign file) is a TrainerError naming the file, and nothing in
    it has run."""
    try:
        with torch.serialization.safe_globals(_LEGACY_NUMPY_GLOBALS):
            state = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise TrainerError(f"cannot resume: {path} is missing") from None
    except Exception as exc:  # UnpicklingError, RuntimeError: not a checkpoint rlguard wrote
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        raise TrainerError(f"cannot resume from {path}: not a plain-data trainer state ({first})") from None
    if not isinstance(state, dict) or not {"step", "policy_version", "rng", "actor_optimizer"} <= set(state):
        raise TrainerError(f"cannot resume from {path}: not a trainer state")
    return state


def plain_rng_state(state: dict[str, Any]) -> dict[str, Any]:
    """An RNG state (``trainer.runtime.rng_state``) as tensors and numbers only."""
    if "python_state" in state:
        return state  # already plain
    version, internal, gauss = state["python"]
    name, keys, pos, has_gauss, cached = state["numpy"]
    plain: dict[str, Any] = {
        "python_version": int(version),
        "python_state": torch.tensor(list(internal), dtype=torch.int64),
        "python_gauss": None if gauss is None else float(gauss),
        "numpy_name": str(name),
        "numpy_keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
        "numpy_pos": int(pos),
        "numpy_has_gauss": int(has_gauss),
        "numpy_gauss": float(cached),
        "torch": state["torch"],
    }
    if "cuda" in state:
        plain["cuda"] = list(state["cuda"])
    return plain


def rng_state_from_plain(plain: dict[str, Any]) -> dict[str, Any]:
    """The inverse of :func:`plain_rng_state` (an older checkpoint's state passes through)."""
    if "python_state" not in plain:
        return plain
    state: dict[str, Any] = {
        "python": (
            plain["python_version"],
            tuple(int(x) for x in plain["python_state"].tolist()),
            plain["python_gauss"],
        ),
        "numpy": (
            plain["numpy_name"],
            plain["numpy_keys"].numpy().astype(np.uint32),
            plain["numpy_pos"],
            plain["numpy_has_gauss"],
            plain["numpy_gauss"],
        ),
        "torch": plain["torch"],
    }
    if "cuda" in plain:
        state["cuda"] = plain["cuda"]
    return state


def _legacy_numpy_globals() -> list[Any]:
    """What unpickling NumPy's RNG array from an earlier release's checkpoint needs, and no more."""
    allowed: list[Any] = [np.ndarray, np.dtype, type(np.dtype(np.uint32))]
    for module in ("numpy.core.multiarray", "numpy._core.multiarray"):
        try:
            allowed.append(importlib.import_module(module)._reconstruct)
        except (ImportError, AttributeError):
            continue
    return allowed


_LEGACY_NUMPY_GLOBALS = _legacy_numpy_globals()


def _gather_rng(runtime: Runtime) -> list[dict[str, Any]]:
    mine = rng_state()
    if not runtime.distributed:
        return [mine]
    gathered: list[Any] = [None] * runtime.world_size
    dist.all_gather_object(gathered, mine)
    return gathered
