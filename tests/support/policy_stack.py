"""The built-in policy server over the tiny model, and a gateway whose model proxy forwards to it.

Both are the real thing on loopback ports (``rlguard policy serve``'s app, ``rlguard serve``'s
app); the harness tests and the proxy tests drive them over HTTP.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class Policy:
    url: str  # the base URL a client uses: .../v1
    server: Any  # rollout.policy_server.PolicyServer (its engine scores sequences for the checks)


@contextlib.contextmanager
def tiny_policy(model_dir: Path, max_tokens_limit: int = 256) -> Iterator[Policy]:
    from rollout.hf_engine import HFEngine
    from rollout.policy_server import PolicyServer
    from rollout.serving import serve_in_thread
    from rollout.settings import PolicyServerSettings

    server = PolicyServer(
        HFEngine(model_dir), "tiny", PolicyServerSettings(max_tokens_limit=max_tokens_limit)
    )
    with serve_in_thread(server.app) as url:
        yield Policy(f"{url}/v1", server)


def proxied_settings(state: Path, policy_url: str | None, **gateway: Any) -> Any:
    """Settings of a gateway (SQLite under ``state``) whose model proxy forwards to ``policy_url``."""
    from rlguard.settings import Settings

    settings = Settings(
        state_dir=state,
        database_url=f"sqlite:///{state}/rlguard.db",
        instance=f"test-proxy-{os.getpid()}-{uuid.uuid4().hex[:6]}",
        admin_token=uuid.uuid4().hex,
    )
    settings.sandbox.warm_pool_size = gateway.pop("warm_pool_size", 1)
    settings.gateway.policy_url = policy_url
    for key, value in gateway.items():
        setattr(settings.gateway, key, value)
    return settings


TASK = "builtin/matrix-transpose"
SYSTEM = {"role": "system", "content": "You are a coding agent."}


class Ep:
    """An episode of a proxied gateway, seen from a harness: its model endpoint and its rows."""

    def __init__(self, gw: Any, body: dict[str, Any]) -> None:
        self.gw = gw
        self.id = body["episode_id"]
        self.token = body["agent_token"]
        self.tools = body["tools"]
        self.base_url = f"{gw.url}/v1/episodes/{self.id}/model/v1"

    def openai(self) -> Any:
        from openai import OpenAI

        return OpenAI(base_url=self.base_url, api_key=self.token, max_retries=0, timeout=120)

    def post(self, path: str, body: Any, token: str | None = None) -> Any:
        import httpx

        headers = {"Authorization": f"Bearer {token or self.token}"}
        return httpx.post(f"{self.base_url}{path}", json=body, headers=headers, timeout=120)

    def call(self, tool: str, **arguments: Any) -> Any:
        import httpx

        headers = {"Authorization": f"Bearer {self.token}"}
        body = {"tool": tool, "arguments": arguments}
        return httpx.post(
            f"{self.gw.url}/v1/episodes/{self.id}/calls", json=body, headers=headers, timeout=120
        )

    def finish(self) -> dict[str, Any]:
        import httpx

        response = httpx.post(
            f"{self.gw.url}/v1/episodes/{self.id}/finish",
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=300,
        )
        assert response.status_code == 200, response.text
        return response.json()["details"]

    def rows(self) -> list[Any]:
        from store.repository import Store

        store = Store.from_url(self.gw.settings.resolved_database_url)
        try:
            row = store.episode(self.id, with_children=True)
            return list(row.sub_trajectories)
        finally:
            store.close()


def new_episode(gw: Any, task: str = TASK, policy_version: str | None = None) -> Ep:
    import httpx

    headers = {"Authorization": f"Bearer {gw.admin_token}"}
    body = {"task": task, **({"policy_version": policy_version} if policy_version else {})}
    response = httpx.post(f"{gw.url}/v1/episodes", json=body, headers=headers, timeout=300)
    assert response.status_code == 200, response.text
    return Ep(gw, response.json())


def chat(client: Any, messages: list[dict[str, Any]], **kwargs: Any) -> Any:
    """One chat turn asking for the ids and logprobs (the vLLM extension fields)."""
    return client.chat.completions.create(
        model="tiny",
        messages=messages,
        max_tokens=12,
        logprobs=True,
        extra_body={"return_token_ids": True},
        **kwargs,
    )
