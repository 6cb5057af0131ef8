"""``rlguard policy serve`` over real HTTP with the real tiny model: token ids, logprobs, reload."""

import math
import shutil
from pathlib import Path

import httpx
import pytest
import torch
from transformers import AutoModelForCausalLM

from rollout.policy import CompletionsPolicy, Sampling


def _post(url: str, path: str, payload: dict, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.post(f"{url}{path}", json=payload, headers=headers, timeout=60)


def test_token_id_prompt_returns_token_ids_and_true_logprobs(policy_server) -> None:
    tokenizer = policy_server.engine.tokenizer
    prompt = tokenizer.encode("<|im_start|>user\nfix the bug<|im_end|>\n<|im_start|>assistant\n")
    body = _post(
        policy_server.url,
        "/v1/completions",
        {"prompt": prompt, "max_tokens": 12, "logprobs": 0, "return_token_ids": True, "seed": 7},
    ).json()
    choice = body["choices"][0]
    assert choice["prompt_token_ids"] == prompt
    ids, logprobs = choice["token_ids"], choice["logprobs"]["token_logprobs"]
    assert 1 <= len(ids) <= 12 and len(logprobs) == len(ids)
    assert choice["finish_reason"] == ("stop" if len(ids) < 12 else "length")
    usage = {
        "prompt_tokens": len(prompt),
        "completion_tokens": len(ids),
        "total_tokens": len(prompt) + len(ids),
    }
    assert body["usage"] == usage
    # The logprobs are the model's own: a teacher-forced forward pass over prompt+ids agrees.
    rescored = policy_server.engine.score(prompt, ids)
    assert all(abs(a - b) < 1e-4 for a, b in zip(logprobs, rescored, strict=True))
    assert all(lp <= 0 for lp in logprobs)


def test_same_seed_same_tokens_and_string_prompts(policy_server) -> None:
    payload = {"prompt": "def add(a, b):", "max_tokens": 8, "return_token_ids": True, "seed": 3}
    first = _post(policy_server.url, "/v1/completions", payload).json()["choices"][0]
    second = _post(policy_server.url, "/v1/completions", payload).json()["choices"][0]
    assert first["token_ids"] == second["token_ids"]
    assert first["prompt_token_ids"] == policy_server.engine.tokenizer.encode("def add(a, b):")


def test_greedy_generation_runs_to_max_tokens_or_eos(policy_server) -> None:
    payload = {"prompt": [5, 6, 7], "max_tokens": 20, "temperature": 0, "return_token_ids": True}
    choice = _post(policy_server.url, "/v1/completions", payload).json()["choices"][0]
    eos = policy_server.engine.eos_token_ids
    if choice["finish_reason"] == "stop":
        assert choice["token_ids"][-1] in eos
    else:
        assert len(choice["token_ids"]) == 20 and not set(choice["token_ids"]) & set(eos)


@pytest.mark.parametrize(
    ("payload", "fragment"),
    [
        ({"prompt": [1, 2], "max_tokens": 100000}, "exceeds this server's limit"),
        ({"prompt": [1, 10**7], "max_tokens": 4}, "out of range"),
        ({"prompt": "", "max_tokens": 4}, "empty"),
        ({"prompt": [[1], [2]], "max_tokens": 4}, "batched"),
        ({"prompt": [1] * 20000, "max_tokens": 4}, "tokens; the limit"),
        ({"prompt": [1], "max_tokens": 0}, "max_tokens"),
        ({"max_tokens": 4}, "prompt"),
    ],
)
def test_bad_requests_get_400_with_a_message(policy_server, payload: dict, fragment: str) -> None:
    response = _post(policy_server.url, "/v1/completions", payload)
    assert response.status_code == 400
    assert fragment in response.json()["error"]["message"]


def test_chat_completions_and_models(policy_server) -> None:
    tools = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]
    body = _post(
        policy_server.url,
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "hi"}], "tools": tools, "max_tokens": 8, "seed": 1},
    ).json()
    message = body["choices"][0]["message"]
    assert message["role"] == "assistant"
    assert body["usage"]["completion_tokens"] >= 1
    models = httpx.get(f"{policy_server.url}/v1/models").json()["data"]
    assert models[0]["id"] == "tiny" and models[0]["max_model_len"] >= 4096


async def test_completions_policy_client_speaks_the_protocol(policy_server) -> None:
    policy = CompletionsPolicy(f"{policy_server.url}/v1", model="tiny")
    try:
        generation = await policy.generate([5, 6, 7, 8], Sampling(max_tokens=6, seed=11))
    finally:
        await policy.aclose()
    assert 1 <= len(generation.token_ids) <= 6
    rescored = policy_server.engine.score([5, 6, 7, 8], generation.token_ids)
    assert generation.logprobs == pytest.approx(rescored, abs=1e-4)


def test_reload_weights_from_disk_changes_the_policy(
    policy_server, tiny_model_dir: Path, tmp_path: Path
) -> None:
    from tests.rollout.conftest import CONTROL_TOKEN

    auth = {"Authorization": f"Bearer {CONTROL_TOKEN}"}
    prompt, target = [5, 6, 7, 8], [9, 10, 11]
    before = policy_server.engine.score(prompt, target)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    with torch.no_grad():
        for param in model.parameters():
            param.mul_(1.5)
    ckpt = policy_server.reload_root / "ckpt"
    model.save_pretrained(ckpt)
    policy_server.engine.tokenizer.save_pretrained(ckpt)
    original = policy_server.reload_root / "orig"
    shutil.copytree(tiny_model_dir, original)

    missing = str(policy_server.reload_root / "missing")
    bad = _post(policy_server.url, "/reload_weights", {"path": missing}, auth)
    assert bad.status_code == 400 and "checkpoint refused" in bad.json()["error"]["message"]

    ok = _post(policy_server.url, "/update_weights_from_disk", {"model_path": str(ckpt)}, auth)
    assert ok.status_code == 200 and ok.json()["success"] is True
    after = policy_server.engine.score(prompt, target)
    assert any(not math.isclose(a, b, abs_tol=1e-3) for a, b in zip(before, after, strict=True))
    models = httpx.get(f"{policy_server.url}/v1/models").json()["data"][0]
    assert models["root"] == "tiny" and models["version"] == ok.json()["version"]  # no host path

    back = _post(policy_server.url, "/reload_weights", {"path": str(original), "version": "orig"}, auth)
    assert back.json()["version"] == "orig"
    assert policy_server.engine.score(prompt, target) == pytest.approx(before, abs=1e-5)


async def test_policy_client_retries_unavailable_then_reports_bad_requests() -> None:
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse

    from rollout.policy import PolicyError, RetryPolicy
    from rollout.serving import serve_in_thread

    app, hits = FastAPI(), []

    @app.post("/v1/completions")
    async def flaky(body: dict) -> JSONResponse:
        hits.append(body)
        if body["max_tokens"] == 99:
            return JSONResponse({"error": {"message": "max_tokens too large"}}, 400)
        if len(hits) < 3:
            return JSONResponse({"error": {"message": "overloaded"}}, 503)
        choice = {"text": "hi", "token_ids": [7, 8], "logprobs": {"token_logprobs": [-0.5, -1.5]}}
        return JSONResponse({"choices": [{**choice, "finish_reason": "stop"}]})

    with serve_in_thread(app) as url:
        policy = CompletionsPolicy(f"{url}/v1", retry=RetryPolicy(attempts=4, base_s=0.01))
        try:
            generation = await policy.generate([1, 2, 3], Sampling(max_tokens=4))
            assert generation.token_ids == [7, 8] and generation.logprobs == [-0.5, -1.5]
            assert len(hits) == 3 and hits[0]["prompt"] == [1, 2, 3] and hits[0]["return_token_ids"] is True
            with pytest.raises(PolicyError, match="400"):
                await policy.generate([1], Sampling(max_tokens=99))
            assert len(hits) == 4  # a 400 is not retried
        finally:
            await policy.aclose()
