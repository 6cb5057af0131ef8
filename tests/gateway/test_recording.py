"""The proxy's stitching and tool-call matching on the tiny model's real tokenizer and chat template:
tool-calling replies sent back unchanged continue the context token for token, the template's end
of turn is added exactly once, and each model tool call finds the gateway call it became."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gateway.services.call_matching import match_calls
from gateway.services.chat_render import ChatRenderer, RenderError, normalize_messages
from gateway.services.recording import Recording, RecordingFull
from rollout.tinymodel import ensure_tiny_model

BASH = {"type": "function", "function": {"name": "bash", "description": "Run a command",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}  # fmt: skip


@pytest.fixture(scope="module")
def renderer(tmp_path_factory: pytest.TempPathFactory) -> ChatRenderer:
    from transformers import AutoTokenizer

    directory = ensure_tiny_model(Path(tmp_path_factory.mktemp("models")) / "tiny")
    return ChatRenderer(AutoTokenizer.from_pretrained(directory), str(directory))


def _turn(recording: Recording, renderer: ChatRenderer, messages: list[dict[str, Any]], text: str) -> Any:
    """One turn whose model output is ``text`` (tokenised as the engine would have produced it)."""
    plan = recording.plan_chat(renderer, normalize_messages(messages), [BASH])
    completion = [*renderer.encode(text), renderer.stop_token_ids[0]]
    reply = renderer.reply(completion, "stop", parse_tools=True)
    recording.record(plan, completion, [-0.5] * len(completion), "0", reply, reply.content, 1.0)
    return plan, completion, reply


def test_the_template_ends_a_turn_the_way_the_model_did(renderer: ChatRenderer) -> None:
    assert renderer.turn_suffix == "<|im_end|>\n"
    im_end = renderer.encode("<|im_end|>")
    assert renderer.stop_token_ids[0] == im_end[0]
    assert renderer.close_turn([5, *im_end]) == renderer.encode("\n")  # the model emitted <|im_end|>
    assert renderer.close_turn([5, 6]) == renderer.encode("<|im_end|>\n")  # cut by max_tokens


def test_tool_call_replies_sent_back_unchanged_continue_the_context(renderer: ChatRenderer) -> None:
    recording = Recording("v1", max_turns=10)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "Agent."},
        {"role": "user", "content": "Fix it."},
    ]
    call = 'Let me look.\n<tool_call>\n{"name": "bash", "arguments": {"command": "ls -la"}}\n</tool_call>'
    plan, completion, reply = _turn(recording, renderer, messages, call)
    assert reply.finish_reason == "tool_calls" and reply.content == "Let me look."
    [tool_call] = reply.tool_calls
    assert tool_call["function"]["name"] == "bash"
    assert json.loads(tool_call["function"]["arguments"]) == {"command": "ls -la"}

    echoed = json.loads(json.dumps(reply.message()))  # what an OpenAI client sends back
    echoed["tool_calls"][0]["function"]["arguments"] = '{"command":"ls -la"}'  # re-serialised: same call
    messages += [echoed, {"role": "tool", "tool_call_id": tool_call["id"], "content": "matrixlib\ntests\n"}]
    second, _, _ = _turn(recording, renderer, messages, "Done.")
    assert second.kind == "continued" and second.extends
    assert second.ids[: len(plan.ids) + len(completion)] == plan.ids + completion  # the sampled ids kept
    added = renderer.decode(second.ids[len(plan.ids) + len(completion) :])
    tool_turn = "<|im_start|>user\n<tool_response>\nmatrixlib\ntests\n\n</tool_response><|im_end|>\n"
    assert added == "\n" + tool_turn + "<|im_start|>assistant\n"
    assert second.tool_results == ["matrixlib\ntests\n"]
    [sub] = recording.subs
    assert sub.action_mask.count(1) == len(completion) + len(renderer.encode("Done.")) + 1
    assert recording.summary()["drift"] == 0 and len(recording.turns) == 2


def test_changed_replies_dropped_replies_and_changed_tools(renderer: ChatRenderer) -> None:
    recording = Recording(None, max_turns=3)
    base = [{"role": "user", "content": "Fix it."}]
    _, _, reply = _turn(recording, renderer, base, "Hello there")
    changed = [*base, {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "Go on."}]
    plan = recording.plan_chat(renderer, normalize_messages(changed), [BASH])
    assert plan.kind == "drift" and not plan.extends
    dropped = [*base, {"role": "user", "content": "No tool call found."}]  # mini-swe-agent's format error
    assert recording.plan_chat(renderer, normalize_messages(dropped), [BASH]).kind == "rewrite"
    kept = [*base, reply.message(), {"role": "user", "content": "Go on."}]
    assert recording.plan_chat(renderer, normalize_messages(kept), None).why == "the tools changed"
    _turn(recording, renderer, kept, "a")
    _turn(
        recording,
        renderer,
        [*kept, {"role": "assistant", "content": "a"}, {"role": "user", "content": "b"}],
        "c",
    )
    with pytest.raises(RecordingFull, match="limit of 3 model turns"):
        recording.plan_chat(renderer, normalize_messages(base), [BASH])


def test_a_reply_added_to_is_drift_even_when_its_tokens_still_extend(renderer: ChatRenderer) -> None:
    recording = Recording(None, max_turns=3)
    base = [{"role": "user", "content": "Fix it."}]
    plan = recording.plan_chat(renderer, normalize_messages(base), None)
    completion = renderer.encode("Hello there")  # cut by max_tokens: no end of turn sampled
    reply = renderer.reply(completion, "length", parse_tools=False)
    recording.record(plan, completion, [-0.5] * len(completion), "0", reply, reply.content, 1.0)
    added = {"role": "assistant", "content": "Hello there (edited by the harness)"}
    messages = [*base, added, {"role": "user", "content": "Go."}]
    second = recording.plan_chat(renderer, normalize_messages(messages), None)
    assert second.kind == "drift" and second.extends
    assert second.ids[: len(plan.ids) + len(completion)] == plan.ids + completion
    recording.record(second, completion, [-0.5] * len(completion), "0", reply, reply.content, 1.0)
    assert recording.summary()["drift"] == 1 and recording.summary()["sub_trajectories"] == 1


def test_messages_are_checked(renderer: ChatRenderer) -> None:
    with pytest.raises(RenderError, match="role"):
        normalize_messages([{"role": "robot", "content": "x"}])
    with pytest.raises(RenderError, match="image_url"):
        normalize_messages([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}])
    parts = normalize_messages([{"role": "developer", "content": [{"type": "text", "text": "a"}, "b"]}])
    assert parts == [{"role": "system", "content": "ab"}]


@dataclass
class Call:
    seq: int
    tool: str
    arguments: dict[str, Any]
    answer_output: str


def test_model_tool_calls_find_the_gateway_calls_they_became(renderer: ChatRenderer) -> None:
    recording = Recording(None, max_turns=10)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Fix it."}]
    first = '<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call>'
    _, _, reply = _turn(recording, renderer, messages, first)
    messages += [
        reply.message(),
        {"role": "tool", "tool_call_id": "x", "content": "<output>\nmatrixlib\n</output>"},
    ]
    second = '<tool_call>\n{"name": "read_file", "arguments": {"path": "a.py"}}\n</tool_call>'
    _, _, reply = _turn(recording, renderer, messages, second)
    messages += [reply.message(), {"role": "tool", "tool_call_id": "y", "content": "something else"}]
    _turn(
        recording,
        renderer,
        messages,
        '<tool_call>\n{"name": "bash", "arguments": {"command": "rm -rf /"}}\n</tool_call>',
    )
    calls = [
        Call(0, "bash", {"command": "export PAGER=cat; ls", "timeout": 60}, "matrixlib\n"),  # mini's prefix
        Call(1, "read_file", {"path": "a.py"}, "print(1)\n"),
    ]
    counts = match_calls(recording.turns, calls)
    assert [t.gateway_seqs for t in recording.turns] == [[0], [1], [None]]
    assert counts["tool_calls"] == 3 and counts["tool_calls_matched"] == 2
    assert counts["tool_results_seen"] == 1  # the harness showed "something else" for read_file
    assert counts["unmatched_tool_calls"] == [
        {"turn": 2, "name": "bash", "arguments": {"command": "rm -rf /"}}
    ]
