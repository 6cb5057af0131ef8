"""DDP and FSDP2 over gloo with 2 CPU processes equal one process on the whole batch; exact resume."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.trainer.dist_worker import fixed_samples, settings_for
from trainer.checkpoint import load_checkpoint, save_checkpoint
from trainer.ppo import PPOTrainer
from trainer.runtime import init_runtime

WORKER = Path(__file__).with_name("dist_worker.py")


def single_process_run(model_dir: Path, steps: int) -> PPOTrainer:
    trainer = PPOTrainer.from_pretrained(model_dir, settings_for("ddp"), init_runtime(device="cpu"))
    for step in range(steps):
        trainer.train_step(fixed_samples(8, seed=step))
    return trainer


@pytest.fixture(scope="module")
def gloo_checkpoints(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two gloo processes train 2 steps with DDP, then with FSDP2, then with DDP and every episode on
    rank 0 (rank 1 empty: it pads and still steps); one checkpoint per mode."""
    out = tmp_path_factory.mktemp("gloo")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RANK", "WORLD_SIZE", "LOCAL_RANK"))}
    env |= {"OMP_NUM_THREADS": "1", "TRANSFORMERS_VERBOSITY": "error"}
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
        str(WORKER), str(tiny_model_dir), str(out), "2", "ddp", "fsdp", "ddp-empty",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=180, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def one_process(tiny_model_dir: Path) -> PPOTrainer:
    return single_process_run(tiny_model_dir, steps=2)


@pytest.mark.parametrize("parallel", ["ddp", "fsdp", "ddp-empty"])
def test_two_gloo_processes_match_one_process(
    parallel: str, gloo_checkpoints: Path, one_process: PPOTrainer, tiny_model_dir: Path
) -> None:
    checkpoint = gloo_checkpoints / parallel
    actor = load_file(str(checkpoint / "actor" / "model.safetensors"))
    for name, param in one_process.actor.state_dict().items():
        torch.testing.assert_close(actor[name], param, atol=2e-5, rtol=1e-4, msg=name)
    head = load_file(str(checkpoint / "critic" / "value_head.safetensors"))
    torch.testing.assert_close(head["weight"], one_process.critic.value_head.weight, atol=2e-5, rtol=1e-4)
    # the parameters moved at all (the comparison is not between two untouched models)
    base = PPOTrainer.from_pretrained(tiny_model_dir, settings_for("ddp"), init_runtime(device="cpu"))
    assert not torch.allclose(base.critic.value_head.weight, one_process.critic.value_head.weight)


def test_resumed_run_equals_uninterrupted_run(tiny_model_dir: Path, tmp_path: Path) -> None:
    settings = settings_for("ddp").model_copy(
        update={"normalize_advantages": True, "kl_coef": 0.05, "micro_batch_tokens": 256}
    )
    runtime = init_runtime(device="cpu")

    straight = PPOTrainer.from_pretrained(tiny_model_dir, settings, runtime)
    for step in range(4):
        straight.train_step(fixed_samples(4, seed=step))

    first = PPOTrainer.from_pretrained(tiny_model_dir, settings, runtime)
    for step in range(2):
        first.train_step(fixed_samples(4, seed=step))
    save_checkpoint(first, tmp_path / "ckpt")
    torch.manual_seed(12345)  # disturb the RNG: resume must restore it
    resumed = load_checkpoint(tmp_path / "ckpt", settings, runtime, reference_path=tiny_model_dir)
    assert (resumed.step, resumed.policy_version) == (2, 2)
    for step in range(2, 4):
        resumed.train_step(fixed_samples(4, seed=step))

    for (name, a), b in zip(
        straight.actor.state_dict().items(), resumed.actor.state_dict().values(), strict=True
    ):
        assert torch.equal(a, b), name
    for a, b in zip(straight.critic.state_dict().values(), resumed.critic.state_dict().values(), strict=True):
        assert torch.equal(a, b)
