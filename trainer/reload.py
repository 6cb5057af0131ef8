"""Push new weights to a running policy server without restarting it: one interface, three servers.

``WeightSync.push(checkpoint, version)`` makes the server serve ``checkpoint`` (an HF directory the
trainer has just written) and records ``version`` as what it serves; rollouts record that version on
every token span they generate afterwards (``rollout.policy.CompletionsPolicy``).

* ``builtin``: ``rlguard policy serve``, ``POST /reload_weights {"path", "version"}``. The server
  swaps the model under its generation lock and reports the version in every completion, so a
  request in flight finishes on the old weights and is labelled with them.
* ``sglang``: ``POST /update_weights_from_disk {"model_path", "weight_version"}`` (SGLang keeps
  serving; ``weight_version`` is what ``/get_weight_version`` then reports, on versions that know it).
* ``vllm``: vLLM's engine-level reload, reached through the development API server
  (``VLLM_SERVER_DEV_MODE=1``, which exposes ``POST /collective_rpc``): ``update_config`` with
  ``{"model_config": {"model": PATH}}`` on every worker, then ``reload_weights`` (the worker reloads
  the weights in place from the model path, ``GPUModelRunner.reload_weights``), then
  ``POST /reset_prefix_cache`` so no KV computed with the old weights is reused. vLLM's answers carry
  no version, so the caller's ``version_source`` (``current_version``) is what rollouts record.
  ``/collective_rpc`` runs arbitrary worker methods: the dev server must only be reachable by the
  trainer (a private network), never by agents or users.

Every push carries the run's bearer token (``Authorization: Bearer``) when one is given: rlguard's
server refuses reloads without it (``rollout.control``), and SGLang (``--api-key``) and vLLM
(``--api-key``) check the same header. The token is never part of an error message.

GPU-only (no disk round trip): :class:`trainer.weight_broadcast.NcclWeightBroadcast` sends the
trainer's tensors over NCCL to vLLM workers started with
``--worker-extension-cls rollout.vllm_extension.WeightUpdateExtension`` (see docs/trainer.md).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Literal, Protocol

import httpx

from trainer.errors import TrainerError

Protocol_ = Literal["builtin", "sglang", "vllm"]


def server_root(url: str) -> str:
    """``http://host:port`` from a base URL that may end in ``/v1`` (OpenAI-style)."""
    root = url.rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


class WeightSync(Protocol):
    """Makes a policy server serve new weights, and knows which version it serves."""

    def push(self, checkpoint: Path, version: str) -> dict[str, Any]: ...

    def current_version(self) -> str: ...


class _HTTPSync:
    """Shared plumbing: POST JSON, raise a clear error on any refusal, remember the version."""

    def __init__(
        self, url: str, timeout_s: float = 120.0, initial_version: str = "0", token: str | None = None
    ) -> None:
        self.root = server_root(url)
        self.timeout_s = timeout_s
        self._version = initial_version
        self._lock = threading.Lock()
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}

    def current_version(self) -> str:
        with self._lock:
            return self._version

    def _set_version(self, version: str) -> None:
        with self._lock:
            self._version = version

    def _post(self, endpoint: str, body: dict[str, Any] | None, what: str) -> dict[str, Any]:
        try:
            response = httpx.post(
                self.root + endpoint, json=body, headers=self._headers, timeout=self.timeout_s
            )
        except httpx.HTTPError as exc:
            raise TrainerError(f"policy server at {self.root} did not answer {endpoint}: {exc}") from exc
        try:
            answer = response.json() if response.content else {}
        except ValueError:
            answer = {"message": response.text[:200]}
        if response.status_code >= 400:
            detail = (
                answer.get("message") or answer.get("detail") or answer
                if isinstance(answer, dict)
                else answer
            )
            raise TrainerError(f"policy server refused to {what}: {detail}")
        return answer if isinstance(answer, dict) else {"results": answer}


class BuiltinSync(_HTTPSync):
    """``rlguard policy serve``."""

    def push(self, checkpoint: Path, version: str) -> dict[str, Any]:
        answer = self._post(
            "/reload_weights", {"path": str(checkpoint), "version": version}, f"reload {checkpoint}"
        )
        if not answer.get("success", False):
            raise TrainerError(
                f"policy server refused to reload {checkpoint}: {answer.get('message', answer)}"
            )
        self._set_version(str(answer.get("version", version)))
        return answer


class SGLangSync(_HTTPSync):
    """SGLang's ``/update_weights_from_disk``."""

    def push(self, checkpoint: Path, version: str) -> dict[str, Any]:
        body = {"model_path": str(checkpoint), "weight_version": version}
        answer = self._post("/update_weights_from_disk", body, f"reload {checkpoint}")
        if not answer.get("success", False):
            raise TrainerError(
                f"policy server refused to reload {checkpoint}: {answer.get('message', answer)}"
            )
        self._set_version(version)
        return answer


class VLLMSync(_HTTPSync):
    """vLLM through ``/collective_rpc`` (dev mode): point every worker at the new directory, reload
    the weights in place, drop the prefix cache."""

    def push(self, checkpoint: Path, version: str) -> dict[str, Any]:
        overrides = {"model_config": {"model": str(checkpoint)}}
        self._post(
            "/collective_rpc", {"method": "update_config", "args": [overrides]}, "update its model path"
        )
        answer = self._post("/collective_rpc", {"method": "reload_weights"}, f"reload {checkpoint}")
        self._post("/reset_prefix_cache", None, "reset its prefix cache")
        self._set_version(version)
        return {"success": True, "message": f"loaded {checkpoint}", "version": version, **answer}


def make_weight_sync(
    protocol: Protocol_,
    url: str,
    timeout_s: float = 120.0,
    initial_version: str = "0",
    token: str | None = None,
) -> WeightSync:
    """The ``WeightSync`` for ``protocol`` (builtin | sglang | vllm) at ``url``, sending ``token``."""
    kinds: dict[str, type[_HTTPSync]] = {"builtin": BuiltinSync, "sglang": SGLangSync, "vllm": VLLMSync}
    if protocol not in kinds:
        raise TrainerError(f"unknown reload protocol {protocol!r}; use one of {sorted(kinds)}")
    return kinds[protocol](url, timeout_s, initial_version, token)


def reload_policy(
    url: str,
    checkpoint: Path,
    version: str,
    protocol: Protocol_ = "builtin",
    timeout_s: float = 120.0,
    token: str | None = None,
) -> dict[str, Any]:
    """Reload the server's weights from ``checkpoint`` (an HF directory); raise on any refusal."""
    return make_weight_sync(protocol, url, timeout_s, token=token).push(checkpoint, version)
