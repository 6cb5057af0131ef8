"""The recording model proxy against the real built-in policy server (tiny model) and a real gateway
(Docker sandboxes, SQLite), over HTTP with the official OpenAI client: what the engine sampled is
what the store holds, turn by turn, and every way a conversation can go on is recorded honestly."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from openai import BadRequestError

from store.codec import decode_action_mask, decode_logprobs, decode_token_ids
from store.repository import Store
from tests.support.policy_stack import SYSTEM, Policy, chat, new_episode, proxied_settings

pytestmark = pytest.mark.docker


def test_chat_turns_are_one_sub_trajectory_of_exactly_the_sampled_tokens(
    proxy_gateway: Any, tiny_policy_server: Policy
) -> None:
    ep = new_episode(proxy_gateway)
    client = ep.openai()
    messages: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "Fix matrixlib."}]
    turns = []
    for number in range(3):
        response = chat(client, messages, tools=ep.tools, seed=number)
        extra = response.model_extra or {}
        choice = response.choices[0]
        turns.append(
            (
                extra["prompt_token_ids"],
                choice.model_extra["token_ids"],
                [t.logprob for t in choice.logprobs.content],
            )
        )
        messages.append(choice.message.model_dump(exclude_none=True))
        messages.append({"role": "user", "content": f"Result {number}: nothing yet. Go on."})

    for (prompt, completion, _), (next_prompt, _, _) in itertools.pairwise(turns):
        assert next_prompt[: len(prompt) + len(completion)] == prompt + completion  # token for token
    details = ep.finish()
    assert details["model_proxy"]["turns"] == 3
    assert details["model_proxy"]["sub_trajectories"] == 1
    assert details["model_proxy"]["drift"] == 0 and details["model_proxy"]["rewrites"] == 0

    [row] = ep.rows()
    ids = decode_token_ids(row.token_ids).tolist()
    mask = decode_action_mask(row.action_mask).tolist()
    logprobs = decode_logprobs(row.logprobs)
    last_prompt, last_completion, _ = turns[-1]
    assert ids == last_prompt + last_completion
    expected_mask = [0] * len(ids)
    for prompt, completion, lps in turns:
        expected_mask[len(prompt) : len(prompt) + len(completion)] = [1] * len(completion)
        np.testing.assert_allclose(logprobs[len(prompt) : len(prompt) + len(completion)], lps, atol=1e-6)
        # the engine's own teacher-forced logprobs of the stored tokens in the stored context
        scored = tiny_policy_server.server.engine.score(ids[: len(prompt)], completion)
        np.testing.assert_allclose(scored, lps, atol=2e-3)
    assert mask == expected_mask
    assert [t["kind"] for t in row.turns] == ["first", "continued", "continued"]
    assert row.messages[-1]["role"] == "assistant" and row.messages[1]["content"] == "Fix matrixlib."


def test_a_changed_reply_is_drift_and_a_rewritten_history_a_new_sub_trajectory(proxy_gateway: Any) -> None:
    ep = new_episode(proxy_gateway)
    client = ep.openai()
    messages: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "Fix matrixlib."}]
    first = chat(client, messages)
    changed = first.choices[0].message.model_dump(exclude_none=True)
    changed["content"] = "The harness rewrote this reply."  # not a token-for-token extension of it
    messages += [changed, {"role": "user", "content": "Go on."}]
    chat(client, messages)
    chat(client, [SYSTEM, {"role": "user", "content": "Summary of the work so far: none. Go on."}])
    details = ep.finish()["model_proxy"]
    assert (details["drift"], details["rewrites"], details["sub_trajectories"]) == (1, 1, 3)
    rows = ep.rows()
    assert [r.index for r in rows] == [0, 1, 2]
    assert [r.turns[0]["kind"] for r in rows] == ["first", "drift", "rewrite"]
    assert all(decode_action_mask(r.action_mask).sum() > 0 for r in rows)


def test_streamed_turns_are_recorded_whole(proxy_gateway: Any) -> None:
    ep = new_episode(proxy_gateway)
    client = ep.openai()
    messages: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "Fix matrixlib."}]
    stream = client.chat.completions.create(
        model="tiny", messages=messages, max_tokens=10, stream=True, stream_options={"include_usage": True}
    )
    content, usage, finish = "", None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            content += choice.delta.content or ""
            finish = choice.finish_reason or finish
    assert usage is not None and usage.completion_tokens > 0 and finish in ("stop", "length")
    messages += [{"role": "assistant", "content": content}, {"role": "user", "content": "Go on."}]
    chat(client, messages)  # the streamed reply, sent back as it arrived, continues the context
    details = ep.finish()["model_proxy"]
    assert (details["turns"], details["sub_trajectories"], details["drift"]) == (2, 1, 0)
    [row] = ep.rows()
    assert row.turns[0]["text"] == content
    assert row.turns[0]["end"] - row.turns[0]["start"] == usage.completion_tokens


def test_text_completions_continue_when_the_prompt_extends_the_context(proxy_gateway: Any) -> None:
    ep = new_episode(proxy_gateway)
    first = ep.post("/completions", {"prompt": [5, 6, 7, 8], "max_tokens": 6, "return_token_ids": True})
    assert first.status_code == 200, first.text
    choice = first.json()["choices"][0]
    extended = [5, 6, 7, 8, *choice["token_ids"], 9, 10]
    second = ep.post("/completions", {"prompt": extended, "max_tokens": 6, "logprobs": 0})
    assert second.status_code == 200, second.text
    assert (
        len(second.json()["choices"][0]["logprobs"]["token_logprobs"])
        == second.json()["usage"]["completion_tokens"]
    )
    third = ep.post("/completions", {"prompt": "def add(a, b):", "max_tokens": 4, "stream": True})
    assert third.status_code == 200 and third.text.rstrip().endswith("data: [DONE]")
    details = ep.finish()["model_proxy"]
    assert (details["turns"], details["sub_trajectories"], details["rewrites"]) == (3, 2, 1)
    first_row = ep.rows()[0]
    assert decode_token_ids(first_row.token_ids).tolist()[: len(extended)] == extended


def test_refusals_are_clear_and_in_openai_shape(proxy_gateway: Any) -> None:
    ep, other = new_episode(proxy_gateway), new_episode(proxy_gateway)
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    anonymous = httpx.post(f"{ep.base_url}/chat/completions", json=body, timeout=60)
    foreign = ep.post("/chat/completions", body, token=other.token)
    # another episode's live token is refused exactly as no token is: no oracle of live tokens
    assert anonymous.status_code == foreign.status_code == 401 and anonymous.content == foreign.content
    two = ep.post("/chat/completions", {**body, "n": 2})
    assert two.status_code == 400 and "n" in two.json()["error"]["message"]
    with pytest.raises(BadRequestError, match="max_tokens=100000 exceeds this server's limit"):
        ep.openai().chat.completions.create(model="tiny", messages=body["messages"], max_tokens=100_000)
    role = ep.post("/chat/completions", {"messages": [{"role": "robot", "content": "hi"}]})
    assert role.status_code == 400 and "role" in role.json()["error"]["message"]
    huge = ep.post("/chat/completions", {**body, "messages": [{"role": "user", "content": "x" * 300_000}]})
    assert huge.status_code == 413
    assert ep.post("/chat/completions", body).status_code == 200
    ep.finish()
    ended = ep.post("/chat/completions", body)
    assert ended.status_code == 409 and "is finished" in ended.json()["error"]["message"]
    models = httpx.get(
        f"{other.base_url}/models", headers={"Authorization": f"Bearer {other.token}"}, timeout=60
    )
    assert models.status_code == 200 and models.json()["data"][0]["id"] == "tiny"
    assert "audit_only" in other.finish()  # no model turn: the episode says why it cannot train


def test_without_a_policy_server_the_proxy_says_what_to_set(tmp_path: Path) -> None:
    from rlguard.loops.local_gateway import local_gateway

    with local_gateway(proxied_settings(tmp_path, None, warm_pool_size=0)) as served:
        ep = new_episode(served)
        answer = ep.post("/chat/completions", {"messages": [{"role": "user", "content": "hi"}]})
        assert answer.status_code == 404  # a 4xx: OpenAI clients do not retry it
        assert "RLGUARD_GATEWAY__POLICY_URL" in answer.json()["error"]["message"]
        details = ep.finish()
    assert "RLGUARD_GATEWAY__POLICY_URL is unset" in details["audit_only"]


def test_export_has_the_fields_trainers_read_and_loads_with_datasets(
    proxy_gateway: Any, tmp_path: Path
) -> None:
    import datasets
    import pyarrow.parquet as pq

    from gateway.export import export

    ep, silent = new_episode(proxy_gateway), new_episode(proxy_gateway)
    client = ep.openai()
    messages: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "Fix matrixlib."}]
    first = chat(client, messages)
    messages += [
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "user", "content": "Go on."},
    ]
    second = chat(client, messages)
    ep.finish()
    silent.finish()  # no model turn: left out, and the export says why

    store = Store.from_url(proxy_gateway.settings.resolved_database_url)
    try:
        parquet = export(store, tmp_path / "rows.parquet", "parquet", ("finished",))
        jsonl = export(store, tmp_path / "rows.jsonl", "jsonl", ("finished",))
    finally:
        store.close()
    assert parquet.rows == jsonl.rows >= 1
    assert silent.id in dict(parquet.without_rows)
    assert "did not call its model through" in dict(parquet.without_rows)[silent.id]
    meta = json.loads(pq.read_metadata(tmp_path / "rows.parquet").metadata[b"rlguard.export"])
    assert meta["models"] == ["tiny"] and meta["tokenizers"][0].endswith("tiny")
    assert json.loads((tmp_path / "rows.jsonl.meta.json").read_text())["rlguard.export"] == meta

    for path, kind in ((tmp_path / "rows.parquet", "parquet"), (tmp_path / "rows.jsonl", "json")):
        loaded = datasets.load_dataset(kind, data_files=str(path), split="train")
        [row] = [r for r in loaded if r["episode_id"] == ep.id]
        prompt = first.model_extra["prompt_token_ids"]
        assert row["prompt_ids"] == prompt
        assert row["prompt_ids"] + row["response_ids"] == row["token_ids"]
        assert row["response_mask"] == row["loss_mask"] == row["action_mask"][len(prompt) :]
        assert (
            row["response_ids"][-len(second.choices[0].model_extra["token_ids"]) :]
            == second.choices[0].model_extra["token_ids"]
        )
        assert len(row["response_logprobs"]) == len(row["response_ids"])
        assert row["is_last"] and row["sub_index"] == 0 and row["trainable"] and row["drift"] == 0
        assert row["reward"] is not None and row["status"] == "finished"
        assert [m["role"] for m in row["messages"]] == ["system", "user", "assistant", "user", "assistant"]
