"""Fixtures for the rollout tests (agent loop, policies, compaction, Ray, grading, tasks)."""

from pathlib import Path

import pytest

from rollout.tinymodel import ensure_tiny_model


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The locally-built tiny model (config + seeded weights + home-made tokenizer), built once."""
    return ensure_tiny_model(tmp_path_factory.mktemp("models") / "tiny")


@pytest.fixture(scope="session")
def policy_server(tiny_model_dir: Path):
    """``rlguard policy serve`` over the tiny model on a loopback port (real HTTP, real model)."""
    from rollout.hf_engine import HFEngine
    from rollout.policy_server import PolicyServer
    from rollout.serving import serve_in_thread
    from rollout.settings import PolicyServerSettings

    server = PolicyServer(HFEngine(tiny_model_dir), "tiny", PolicyServerSettings(max_tokens_limit=256))
    with serve_in_thread(server.app) as url:
        server.url = url
        yield server
