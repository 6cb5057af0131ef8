"""Weight sync behind one interface: each server's reload dialect, spoken to a real loopback server.

vLLM and SGLang need GPUs, so each is stood in for by a small HTTP server that speaks its reload API
exactly as documented (vLLM's dev-mode ``/collective_rpc`` + ``/reset_prefix_cache``, SGLang's
``/update_weights_from_disk``) and records what it was asked; the built-in server is the real one
(``tests/trainer/test_cli_loop.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI, HTTPException, Request

from rollout.serving import serve_in_thread
from trainer.errors import TrainerError
from trainer.reload import make_weight_sync, reload_policy


def vllm_dev_server(calls: list[tuple[str, Any]]) -> FastAPI:
    """vLLM's dev-mode routes: collective_rpc runs a worker method on every worker."""
    app = FastAPI()
    workers = [{"model": "/models/base", "loaded": "/models/base"} for _ in range(2)]

    @app.post("/collective_rpc")
    async def collective_rpc(request: Request) -> dict[str, Any]:
        body = await request.json()
        method, args = body.get("method"), body.get("args", [])
        calls.append((method, args))
        if method == "update_config":
            model = args[0]["model_config"]["model"]
            if not Path(model).is_dir():
                raise HTTPException(500, f"no such model directory {model}")
            for worker in workers:
                worker["model"] = model
            return {"results": [None, None]}
        if method == "reload_weights":
            for worker in workers:
                worker["loaded"] = worker["model"]
            return {"results": [None, None]}
        raise HTTPException(400, f"unknown method {method}")

    @app.post("/reset_prefix_cache")
    async def reset_prefix_cache() -> None:
        calls.append(("reset_prefix_cache", None))

    app.state.workers = workers
    return app


def sglang_server(calls: list[dict[str, Any]]) -> FastAPI:
    app = FastAPI()

    @app.post("/update_weights_from_disk")
    async def update(request: Request) -> dict[str, Any]:
        body = await request.json()
        calls.append(body)
        ok = Path(body["model_path"]).is_dir()
        return {"success": ok, "message": "Succeeded to update model weights." if ok else "no such path"}

    return app


def test_vllm_sync_points_every_worker_at_the_checkpoint_reloads_and_drops_the_prefix_cache(tmp_path) -> None:
    calls: list[tuple[str, Any]] = []
    app = vllm_dev_server(calls)
    with serve_in_thread(app) as url:
        sync = make_weight_sync("vllm", f"{url}/v1")
        assert sync.current_version() == "0"
        answer = sync.push(tmp_path, "3")
        assert answer["success"] and sync.current_version() == "3"
        assert [c[0] for c in calls] == ["update_config", "reload_weights", "reset_prefix_cache"]
        assert calls[0][1] == [{"model_config": {"model": str(tmp_path)}}]
        assert all(w["loaded"] == str(tmp_path) for w in app.state.workers)
        with pytest.raises(TrainerError, match="no such model directory"):
            sync.push(tmp_path / "missing", "4")
        assert sync.current_version() == "3"  # a refused push leaves the served version as it was


def test_sglang_sync_sends_the_path_and_the_weight_version(tmp_path) -> None:
    calls: list[dict[str, Any]] = []
    with serve_in_thread(sglang_server(calls)) as url:
        answer = reload_policy(url, tmp_path, "5", "sglang")
        assert answer["success"] and calls == [{"model_path": str(tmp_path), "weight_version": "5"}]
        with pytest.raises(TrainerError, match="no such path"):
            reload_policy(url, tmp_path / "missing", "6", "sglang")


def test_unknown_protocol_and_unreachable_server_are_clear_errors(tmp_path) -> None:
    with pytest.raises(TrainerError, match="unknown reload protocol"):
        make_weight_sync("triton", "http://127.0.0.1:9")  # type: ignore[arg-type]
    with pytest.raises(TrainerError, match="did not answer"):
        reload_policy("http://127.0.0.1:9/v1", tmp_path, "1", "vllm", timeout_s=2)
