"""Round 3, finding 4c: resuming a run unpickled ``trainer_state.pt`` with ``weights_only=False``.

Anyone who can write into a run's checkpoint folder (a shared volume, a copied run directory)
could plant a pickle that runs a command when the run resumes. The state is now plain data
(tensors, numbers, JSON-able settings) read with ``weights_only=True``; a planted pickle is a
clear ``TrainerError`` and nothing in it runs. Real checkpoints of a real (tiny) model.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from tests.trainer.conftest import build_tiny_model
from trainer.checkpoint import STATE_FILE, load_checkpoint, save_checkpoint
from trainer.errors import TrainerError
from trainer.ppo import PPOTrainer
from trainer.runtime import init_runtime, rng_state
from trainer.settings import TrainerSettings


class _Planted:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A tiny model and a checkpoint of a trainer on it, as ``TrainingRun`` writes them."""
    model = build_tiny_model(tmp_path_factory.mktemp("tiny"))
    trainer = PPOTrainer.from_pretrained(model, TrainerSettings(), init_runtime(device="cpu"))
    checkpoint = save_checkpoint(trainer, tmp_path_factory.mktemp("run") / "step-000001")
    return model, checkpoint


def test_a_planted_pickle_in_trainer_state_never_runs(saved: tuple[Path, Path], tmp_path: Path) -> None:
    model, checkpoint = saved
    planted = tmp_path / "step-000002"
    planted.mkdir()
    (planted / "actor").symlink_to(checkpoint / "actor", target_is_directory=True)
    marker = tmp_path / "pickle-ran"
    state = {"step": 1, "policy_version": 1, "actor_optimizer": _Planted(marker), "rng": []}
    torch.save(state, planted / STATE_FILE)  # the format a checkpoint has, with a payload in it
    with pytest.raises(TrainerError, match=r"cannot resume from .*trainer_state\.pt"):
        load_checkpoint(planted, TrainerSettings(), init_runtime(device="cpu"), reference_path=model)
    assert not marker.exists()


def test_the_state_is_plain_data_and_resumes(saved: tuple[Path, Path]) -> None:
    model, checkpoint = saved
    state = torch.load(checkpoint / STATE_FILE, map_location="cpu", weights_only=True)  # no allowlist
    assert isinstance(state["settings"], dict) and isinstance(state["rng"][0]["numpy_keys"], torch.Tensor)
    resumed = load_checkpoint(checkpoint, TrainerSettings(), init_runtime(device="cpu"), reference_path=model)
    assert resumed.step == 0


def test_a_checkpoint_of_the_earlier_format_still_resumes(saved: tuple[Path, Path], tmp_path: Path) -> None:
    """Earlier releases stored NumPy's RNG state as an array: allowed, and nothing else."""
    model, checkpoint = saved
    state = torch.load(checkpoint / STATE_FILE, map_location="cpu", weights_only=True)
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    (legacy / "actor").symlink_to(checkpoint / "actor", target_is_directory=True)
    (legacy / "critic").symlink_to(checkpoint / "critic", target_is_directory=True)
    torch.save({**state, "rng": [rng_state()]}, legacy / STATE_FILE)
    resumed = load_checkpoint(legacy, TrainerSettings(), init_runtime(device="cpu"), reference_path=model)
    assert resumed.policy_version == state["policy_version"]
