"""Fixtures for the rollout tests (agent loop, policies, compaction, Ray, grading, tasks)."""

from pathlib import Path

import pytest

from rollout.tinymodel import ensure_tiny_model


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The locally-built tiny model (config + seeded weights + home-made tokenizer), built once."""
    return ensure_tiny_model(tmp_path_factory.mktemp("models") / "tiny")


CONTROL_TOKEN = "test-control-token-0123456789abcdef"


@pytest.fixture(scope="session")
def policy_server(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    """``rlguard policy serve`` over the tiny model on a loopback port (real HTTP, real model); its
    reloads need ``CONTROL_TOKEN`` and read only under ``server.reload_root``."""
    from rollout.control import ReloadControl
    from rollout.hf_engine import HFEngine
    from rollout.policy_server import PolicyServer
    from rollout.serving import serve_in_thread
    from rollout.settings import PolicyServerSettings

    root = tmp_path_factory.mktemp("policy-checkpoints")
    control = ReloadControl(CONTROL_TOKEN, (root,))
    limits = PolicyServerSettings(max_tokens_limit=256)
    server = PolicyServer(HFEngine(tiny_model_dir), "tiny", limits, control)
    with serve_in_thread(server.app) as url:
        server.url = url
        server.reload_root = root
        yield server


@pytest.fixture(scope="session")
def gateway(tmp_path_factory: pytest.TempPathFactory):
    """A real gateway (SQLite, real guard, local Docker sandboxes) on a loopback port."""
    import os

    from rlguard.loops.local_gateway import local_gateway
    from rlguard.settings import Settings

    state = tmp_path_factory.mktemp("gateway-state")
    settings = Settings(
        state_dir=state,
        database_url=f"sqlite:///{state}/rlguard.db",
        instance=f"test-rollout-{os.getpid()}",
        admin_token="test-admin-token",
    )
    settings.sandbox.warm_pool_size = 2
    with local_gateway(settings) as gw:
        yield gw


@pytest.fixture(scope="session")
def store(gateway):
    """The gateway's database, for reading back what the runner stored."""
    from store.repository import Store

    return Store.from_url(gateway.settings.resolved_database_url)


@pytest.fixture
async def gateway_client(gateway):
    from rollout.gateway_client import GatewayClient

    client = GatewayClient(gateway.url, gateway.admin_token)
    yield client
    await client.aclose()


@pytest.fixture(scope="session")
def chat_format(tiny_model_dir: Path):
    from transformers import AutoTokenizer

    from rollout.chat_format import ChatFormat

    return ChatFormat(AutoTokenizer.from_pretrained(tiny_model_dir))
