"""Ask the policy server to load the newest checkpoint from disk.

Two dialects: rlguard's built-in server (``POST /reload_weights {"path", "version"}``) and SGLang
(``POST /update_weights_from_disk {"model_path"}``); both answer ``{"success": bool, "message"}``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import httpx

from trainer.errors import TrainerError


def server_root(url: str) -> str:
    """``http://host:port`` from a base URL that may end in ``/v1`` (OpenAI-style)."""
    root = url.rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


def reload_policy(
    url: str,
    checkpoint: Path,
    version: str,
    protocol: Literal["builtin", "sglang"] = "builtin",
    timeout_s: float = 120.0,
) -> dict[str, Any]:
    """Reload the server's weights from ``checkpoint`` (an HF directory); raise on any refusal."""
    if protocol == "sglang":
        endpoint, body = "/update_weights_from_disk", {"model_path": str(checkpoint)}
    else:
        endpoint, body = "/reload_weights", {"path": str(checkpoint), "version": version}
    try:
        response = httpx.post(server_root(url) + endpoint, json=body, timeout=timeout_s)
    except httpx.HTTPError as exc:
        raise TrainerError(f"policy server at {url} did not answer the reload: {exc}") from exc
    try:
        answer = response.json()
    except ValueError:
        answer = {"message": response.text[:200]}
    if response.status_code >= 400 or not answer.get("success", False):
        raise TrainerError(f"policy server refused to reload {checkpoint}: {answer.get('message', answer)}")
    return answer
