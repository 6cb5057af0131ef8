"""The scripted policy: realistic honest and cheating episodes, with tokens scored by the tiny model."""

import re
from pathlib import Path

import pytest

from rollout.agent import AgentConfig, run_episode
from rollout.errors import RolloutError
from rollout.hf_engine import HFEngine
from rollout.runner import count_intercepts
from rollout.scripted import Scorer, ScriptBook
from tasks.spec import TaskRegistry
from tests.rollout.helpers import RecordingPolicy, mask_runs, stored_rows

TASK = "builtin/stats-median"


@pytest.fixture(scope="module")
def scorer(tiny_model_dir: Path) -> Scorer:
    return Scorer(HFEngine(tiny_model_dir))


def test_builtin_script_expands_for_every_builtin_task() -> None:
    book = ScriptBook.load()
    for task in TaskRegistry(["builtin"]).list():
        for behaviour in ("honest", "honest_long", "cheat"):
            texts, _ = book.turns(task, behaviour)
            assert texts and all("<tool_call>" in t for t in texts[:-1])
        honest, _ = book.turns(task, "honest")
        assert any('"name": "write_file"' in t for t in honest)  # writes the reference fix
        assert '"name": "submit"' in honest[-1]


def test_bad_scripts_fail_with_the_file_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("behaviours:\n  honest:\n    - say: hi\n      call: {name: bash}\n      raw: oops\n")
    with pytest.raises(RolloutError, match=r"bad\.yaml: behaviours\.honest\.0.*exactly one of"):
        ScriptBook.load(bad)
    bad.write_text("behaviours: [unclosed\n")
    with pytest.raises(RolloutError, match="not valid YAML"):
        ScriptBook.load(bad)
    with pytest.raises(RolloutError, match="no behaviour 'nope'"):
        ScriptBook.load().turns(TaskRegistry(["builtin"]).get(TASK), "nope")


async def test_honest_episode_is_rewarded_and_its_logprobs_are_the_models(
    gateway_client, chat_format, scorer, store
) -> None:
    task = TaskRegistry(["builtin"]).get(TASK)
    policy = RecordingPolicy(ScriptBook.load().policy_for(task, "honest", chat_format, scorer, "scripted-0"))
    config = AgentConfig(max_turns=12, context_budget_tokens=16384)
    result = await run_episode(gateway_client, policy, chat_format, task.id, task.instructions, config)

    assert result.status == "submitted" and result.reward == 1.0, result.details
    row = stored_rows(store, result.episode_id)[0]
    runs = mask_runs(row["action_mask"])
    assert len(runs) == len(policy.calls) == result.turns
    for (start, end), (prompt, generation) in zip(runs, policy.calls, strict=True):
        assert row["token_ids"][:start] == prompt and row["token_ids"][start:end] == generation.token_ids
        # Teacher forcing: the stored logprobs are the tiny model's for exactly these tokens.
        rescored = scorer.engine.score(prompt, generation.token_ids)
        assert row["logprobs"][start:end] == pytest.approx(rescored, abs=1e-4)
        assert all(lp < 0 for lp in rescored)
    assert "<tool_call>" in chat_format.decode(row["token_ids"][runs[0][0] : runs[0][1]])


async def test_cheating_episode_is_intercepted_and_not_rewarded(gateway_client, chat_format, scorer) -> None:
    task = TaskRegistry(["builtin"]).get(TASK)
    policy = ScriptBook.load().policy_for(task, "cheat", chat_format, scorer)
    config = AgentConfig(max_turns=12, context_budget_tokens=16384)
    result = await run_episode(gateway_client, policy, chat_format, task.id, task.instructions, config)

    assert result.status == "submitted"
    assert result.reward is not None and result.reward < 1.0
    assert result.parse_errors == 1  # the script's deliberately malformed call, shown to the model
    assert await count_intercepts(gateway_client, result) >= 2


async def test_gateway_rejections_and_malformed_calls_are_shown_to_the_model(
    gateway_client, chat_format, scorer, store
) -> None:
    from rollout.chat_format import tool_call_text
    from rollout.scripted import ScriptedPolicy

    task = TaskRegistry(["builtin"]).get(TASK)
    texts = [
        tool_call_text("edit_file", {"path": "statskit/core.py"}),  # missing old_str/new_str: gateway 422
        tool_call_text("launch_rockets", {}),  # unknown tool: gateway 422
        "I think I am done.",  # no tool call at all
        tool_call_text("submit", {}),
    ]
    policy = ScriptedPolicy(texts, chat_format, scorer)
    config = AgentConfig(max_turns=8, context_budget_tokens=16384)
    result = await run_episode(gateway_client, policy, chat_format, task.id, task.instructions, config)

    assert result.status == "submitted" and result.turns == 4
    assert result.rejected_calls == 2 and result.parse_errors == 1
    text = chat_format.decode(stored_rows(store, result.episode_id)[0]["token_ids"])
    responses = re.findall(r"<tool_response>\n(.*?)\n</tool_response>", text, re.DOTALL)
    assert len(responses) == 3
    assert responses[0].startswith("Error:") and "old_str" in responses[0]
    assert responses[1].startswith("Error:") and "launch_rockets" in responses[1]
    assert responses[2].startswith("Error: no tool call found")
