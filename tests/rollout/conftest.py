"""Fixtures for the rollout tests (agent loop, policies, compaction, Ray, grading, tasks)."""

from pathlib import Path

import pytest

from rollout.tinymodel import ensure_tiny_model


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The locally-built tiny model (config + seeded weights + home-made tokenizer), built once."""
    return ensure_tiny_model(tmp_path_factory.mktemp("models") / "tiny")
