"""End to end: the built-in policy server (real HTTP, real tiny model) through a real gateway + sandbox.

What is stored must be exactly what the policy saw and produced: each prompt sent is a prefix of the
stored token ids (nothing re-tokenised), the action mask is 1 exactly on the server's generated ids,
and the stored logprobs are the server's.
"""

from dataclasses import replace

import pytest

from rollout.agent import AgentConfig, run_episode
from rollout.policy import CompletionsPolicy
from tasks.spec import TaskRegistry
from tests.rollout.helpers import RecordingPolicy, mask_runs, stored_rows

TASK = "builtin/stats-median"


@pytest.fixture
async def served_policy(policy_server):
    policy = RecordingPolicy(
        CompletionsPolicy(f"{policy_server.url}/v1", model="tiny", policy_version="v-test")
    )
    yield policy
    await policy.inner.aclose()


def _check_sub_trajectory(row: dict, calls: list) -> None:
    """``calls`` are the (prompt, generation) pairs served while this sub-trajectory was current."""
    ids, mask, logprobs = row["token_ids"], row["action_mask"], row["logprobs"]
    assert len(ids) == len(mask) == len(logprobs)
    runs = mask_runs(mask)
    assert len(runs) == len(calls)
    for (start, end), (prompt, generation) in zip(runs, calls, strict=True):
        assert ids[:start] == prompt, "the prompt sent must be exactly the stored context before it"
        assert ids[start:end] == generation.token_ids
        assert logprobs[start:end] == pytest.approx(generation.logprobs, abs=1e-5)
    assert all(lp == 0.0 for lp, bit in zip(logprobs, mask, strict=True) if not bit)


async def test_episode_with_policy_server_stores_exact_tokens(
    gateway_client, served_policy, chat_format, store
) -> None:
    task = TaskRegistry(["builtin"]).get(TASK)
    config = AgentConfig(max_turns=3, max_tokens_per_turn=40, context_budget_tokens=16384, seed=5)
    result = await run_episode(gateway_client, served_policy, chat_format, TASK, task.instructions, config)

    assert result.status == "max_turns" and result.turns == 3 and result.error is None
    assert result.reward is not None and 0.0 <= result.reward <= 1.0
    rows = stored_rows(store, result.episode_id)
    assert len(rows) == 1 and rows[0]["policy_version"] == "v-test"
    assert rows[0]["token_ids"] == result.sub_trajectories[0].token_ids
    _check_sub_trajectory(rows[0], served_policy.calls)
    # The first prompt is the chat template's rendering of system + task + tools, then "assistant".
    first_prompt = served_policy.calls[0][0]
    text = chat_format.decode(first_prompt)
    assert text.startswith("<|im_start|>system\n") and task.instructions.strip() in text
    assert text.endswith("<|im_end|>\n<|im_start|>assistant\n")
    # A random tiny model does not write tool calls: the model is told so, as a tool response.
    assert result.parse_errors >= 1
    assert "no tool call found" in chat_format.decode(rows[0]["token_ids"])


async def test_compaction_starts_new_sub_trajectories(
    gateway_client, served_policy, chat_format, store
) -> None:
    task = TaskRegistry(["builtin"]).get(TASK)
    prefix_len = len(
        chat_format.prompt_ids(AgentConfig().system_prompt, task.instructions, await gateway_client.tools())
    )
    config = AgentConfig(
        max_turns=6,
        max_tokens_per_turn=64,
        summary_max_tokens=32,
        context_budget_tokens=prefix_len + 400,
        keep_recent_turns=1,
        seed=9,
    )
    result = await run_episode(gateway_client, served_policy, chat_format, TASK, task.instructions, config)

    assert result.compactions >= 1
    rows = stored_rows(store, result.episode_id)
    assert len(rows) >= 2 and [r["sub_index"] for r in rows] == list(range(len(rows)))
    prefix = chat_format.prompt_ids(config.system_prompt, task.instructions, await gateway_client.tools())
    calls = list(served_policy.calls)
    for row in rows:
        n_runs = len(mask_runs(row["action_mask"]))
        _check_sub_trajectory(row, calls[:n_runs])
        calls = calls[n_runs:]
        assert row["token_ids"][: len(prefix)] == prefix  # each starts from system + task
    assert not calls
    later = chat_format.decode(rows[1]["token_ids"])
    assert "Summary of your earlier work" in later
    first = chat_format.decode(rows[0]["token_ids"])
    assert "Your context is almost full" in first


async def test_chat_completions_mode_is_recorded_but_not_trainable(
    gateway_client, policy_server, chat_format
) -> None:
    from rollout.policy import ChatCompletionsPolicy

    task = TaskRegistry(["builtin"]).get(TASK)
    policy = ChatCompletionsPolicy(f"{policy_server.url}/v1", model="tiny", policy_version="eval")
    config = AgentConfig(max_turns=2, max_tokens_per_turn=24, context_budget_tokens=16384)
    try:
        result = await run_episode(gateway_client, policy, chat_format, TASK, task.instructions, config)
    finally:
        await policy.aclose()
    assert result.status == "max_turns" and result.turns == 2 and result.reward is not None
    view = await gateway_client.episode(result.episode_id)
    assert [s["trainable"] for s in view["sub_trajectories"]] == [False]
    assert view["sub_trajectories"][0]["num_action_tokens"] == result.generated_tokens > 0


async def test_time_budget_ends_the_episode_which_is_still_graded_and_stored(
    gateway_client, served_policy, chat_format, store
) -> None:
    task = TaskRegistry(["builtin"]).get(TASK)
    config = AgentConfig(max_turns=1000, max_tokens_per_turn=32, context_budget_tokens=1_000_000,
                         episode_timeout_s=3.0, seed=1)  # fmt: skip
    result = await run_episode(gateway_client, served_policy, chat_format, TASK, task.instructions, config)

    assert result.status == "timeout" and 1 <= result.turns < 1000
    assert result.reward is not None  # graded all the same
    rows = stored_rows(store, result.episode_id)
    assert len(rows) == 1 and sum(rows[0]["action_mask"]) == result.generated_tokens


class OverAskingPolicy(RecordingPolicy):
    """Asks the real server for more tokens than it allows on the second turn: a real HTTP 400, as
    a misconfigured or failing policy server would answer."""

    async def generate(self, prompt_ids, sampling):
        if self.calls:
            sampling = replace(sampling, max_tokens=100_000)
        return await super().generate(prompt_ids, sampling)


async def test_an_infrastructure_error_is_recorded_as_the_end_reason_and_never_trained(
    gateway_client, policy_server, chat_format, store
) -> None:
    from trainer.data import load_step_data

    task = TaskRegistry(["builtin"]).get(TASK)
    policy = OverAskingPolicy(
        CompletionsPolicy(f"{policy_server.url}/v1", model="tiny", policy_version="v-e")
    )
    config = AgentConfig(max_turns=4, max_tokens_per_turn=24, context_budget_tokens=16384, seed=3)
    try:
        result = await run_episode(gateway_client, policy, chat_format, TASK, task.instructions, config)
    finally:
        await policy.inner.aclose()
    assert result.status == result.end_reason == "error" and result.turns == 1
    assert result.reward is not None and result.sub_trajectories  # still graded and stored
    assert not result.trainable
    view = await gateway_client.episode(result.episode_id)
    assert view["details"]["end_reason"] == "error"
    data = load_step_data(store, 10, episode_ids=[result.episode_id])
    assert data.samples == [] and data.unusable[result.episode_id].startswith("infrastructure error")
    assert load_step_data(store, 10, episode_ids=[result.episode_id]).unusable == {}  # marked: not read again
