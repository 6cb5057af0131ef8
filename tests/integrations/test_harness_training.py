"""Harness episodes are training data: mini-swe-agent (its own agent loop, LiteLLM as its model
client) and an Inspect eval (Inspect's OpenAI-compatible provider) run on rlguard sandboxes with
their model behind the episode's recording proxy, served by the built-in policy server over the
tiny model. The stored rows are exactly what the engine sampled and what the harness was shown,
with no drift, and ``rlguard train`` takes a step on them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no fetch of LiteLLM's price list

from store.codec import decode_action_mask, decode_logprobs, decode_token_ids
from store.repository import Store
from tests.integrations.conftest import REPO, TASK_REF, Gateway

pytestmark = pytest.mark.docker

ENVIRONMENT_CLASS = "rlguard.integrations.mini_swe_agent.RlguardEnvironment"
MODEL_CLASS = "rlguard.integrations.mini_swe_agent.RlguardModel"


def _rows(gateway: Gateway, episode_id: str) -> tuple[Any, list[Any]]:
    store = Store.from_url(gateway.db_url)
    try:
        episode = store.episode(episode_id, with_children=True)
        assert episode is not None
        return episode, list(episode.sub_trajectories)
    finally:
        store.close()


def _generated(row: Any) -> list[list[int]]:
    """The row's generated spans (mask 1), one per model turn."""
    ids, mask = decode_token_ids(row.token_ids).tolist(), decode_action_mask(row.action_mask).tolist()
    return [ids[turn["start"] : turn["end"]] for turn in row.turns if mask[turn["start"] : turn["end"]]]


def _check_rows_are_what_the_engine_sampled(policy: Any, rows: list[Any], shown: list[str]) -> None:
    """Each generated span: decoded, what the harness was shown; re-scored by the engine in its
    stored context, the logprobs the engine reported when it sampled it."""
    tokenizer = policy.server.engine.tokenizer
    spans = [(row, turn) for row in rows for turn in row.turns]
    assert len(spans) == len(shown)
    for (row, turn), text in zip(spans, shown, strict=True):
        ids = decode_token_ids(row.token_ids).tolist()
        logprobs = decode_logprobs(row.logprobs)
        completion = ids[turn["start"] : turn["end"]]
        assert set(decode_action_mask(row.action_mask)[turn["start"] : turn["end"]]) == {1}
        without_stop = (
            completion[:-1] if completion[-1] == tokenizer.convert_tokens_to_ids("<|im_end|>") else completion
        )
        assert tokenizer.decode(without_stop, skip_special_tokens=False) == text
        scored = policy.server.engine.score(ids[: turn["start"]], completion)
        assert scored == pytest.approx(logprobs[turn["start"] : turn["end"]].tolist(), abs=2e-3)


def test_mini_swe_agent_through_the_model_proxy(
    proxied_gateway: Gateway, policy: Any, policy_version: str
) -> None:
    from minisweagent.agents import get_agent
    from minisweagent.config import get_config_from_spec
    from minisweagent.environments import get_environment
    from minisweagent.models import get_model
    from minisweagent.utils.serialize import recursive_merge

    config = recursive_merge(
        get_config_from_spec("mini.yaml"),
        {
            "environment": {
                "environment_class": ENVIRONMENT_CLASS,
                "task": TASK_REF,
                "gateway_url": proxied_gateway.url,
                "admin_token": proxied_gateway.admin_token,
                "policy_version": policy_version,
            },
            "model": {
                "model_class": MODEL_CLASS,
                "model_name": "hosted_vllm/tiny",
                "model_kwargs": {"max_tokens": 24, "temperature": 1.0},
                "cost_tracking": "ignore_errors",
            },
            "agent": {"cost_limit": 0, "step_limit": 6},
        },
    )
    model = get_model(config=config["model"])
    env = get_environment(config["environment"])
    try:
        agent = get_agent(model, env, {**config["agent"], "agent_class": "default"})
        info = agent.run("Fix matrixlib so its tests pass")
    finally:
        env.close()
    assert info["exit_status"] in ("RepeatedFormatError", "LimitsExceeded", "Submitted")
    shown = [
        m["extra"]["response"]["choices"][0]["message"]["content"] or ""
        for m in agent.messages
        if "response" in m.get("extra", {})
    ]
    episode, rows = _rows(proxied_gateway, env.episode_id)
    assert episode.status == "finished" and episode.reward is not None
    proxy = episode.details["model_proxy"]
    assert proxy["drift"] == 0 and proxy["turns"] == len(shown) >= 3
    _check_rows_are_what_the_engine_sampled(policy, rows, shown)


def test_the_mini_command_exits_and_its_episode_is_finished(
    proxied_gateway: Gateway, policy_version: str, tmp_path: Path
) -> None:
    """``mini ... --exit-immediately`` ends with the tiny model's RepeatedFormatError; the process
    exits and the episode it never closed is finished (graded) with its turns recorded."""
    import yaml

    rlguard_yaml = tmp_path / "rlguard.yaml"
    rlguard_yaml.write_text(
        yaml.safe_dump(
            {
                "environment": {
                    "environment_class": ENVIRONMENT_CLASS,
                    "task": TASK_REF,
                    "gateway_url": proxied_gateway.url,
                    "policy_version": policy_version,
                },
                "model": {
                    "model_class": MODEL_CLASS,
                    "model_name": "hosted_vllm/tiny",
                    "model_kwargs": {"max_tokens": 16},
                    "cost_tracking": "ignore_errors",
                },
                "agent": {"cost_limit": 0},
            }
        )
    )
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "RLGUARD_ADMIN_TOKEN": proxied_gateway.admin_token,
        "MSWEA_CONFIGURED": "true",
        "MSWEA_SILENT_STARTUP": "1",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }
    mini = Path(sys.executable).parent / "mini"
    run = subprocess.run(
        [str(mini), "-c", "mini.yaml", "-c", str(rlguard_yaml), "-t", "Fix matrixlib so its tests pass",
         "--yolo", "--exit-immediately", "-o", str(tmp_path / "run.traj.json")],
        env=env, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    [episode] = proxied_gateway.episodes_of(policy_version)
    assert episode["status"] == "finished" and episode["reward"] is not None
    assert episode["details"]["model_proxy"]["turns"] >= 3 and episode["details"]["model_proxy"]["drift"] == 0
    assert len(episode["sub_trajectories"]) >= 1


def test_inspect_eval_through_the_model_proxy(proxied_gateway: Gateway, policy: Any, tmp_path: Path) -> None:
    from inspect_ai import Task, eval
    from inspect_ai.solver import generate, use_tools
    from inspect_ai.tool import bash

    from rlguard.integrations.inspect_sandbox import RlguardSandboxConfig, rlguard_dataset, rlguard_scorer

    config = RlguardSandboxConfig(gateway_url=proxied_gateway.url, admin_token=proxied_gateway.admin_token)
    task = Task(
        dataset=rlguard_dataset("builtin", ["matrix-transpose", "lru-cache"]),
        solver=[use_tools(bash(timeout=60)), generate()],
        scorer=rlguard_scorer(),
        sandbox=("rlguard", config),
        message_limit=8,
    )
    [log] = eval(
        task,
        model="rlguard/tiny",
        max_tokens=24,
        log_dir=str(tmp_path),
        display="none",
    )
    assert log.status == "success", log.error
    assert len(log.samples) == 2
    for sample in log.samples:
        [score] = sample.scores.values()
        episode, rows = _rows(proxied_gateway, score.metadata["episode_id"])
        assert episode.status == "finished" and episode.reward == score.value
        assert episode.details["model_proxy"]["drift"] == 0
        shown = [m.text for m in sample.messages if m.role == "assistant"]
        _check_rows_are_what_the_engine_sampled(policy, rows, shown)


async def test_an_mcp_client_reads_the_model_base_url_and_its_turns_train(
    proxied_gateway: Gateway, policy: Any, policy_version: str
) -> None:
    """The MCP server's ``rlguard://episode`` resource names the episode's model endpoint; a client
    (the SDK's, over stdio) points an OpenAI client at it, plays turns and tools, and submits."""
    import json

    from mcp import Client, StdioServerParameters
    from openai import AsyncOpenAI

    from tests.integrations.conftest import TASK, child_env

    args = ["-m", "rlguard", "mcp", "serve", "--gateway-url", proxied_gateway.url, "--task", TASK,
            "--policy-version", policy_version]  # fmt: skip
    params = StdioServerParameters(command=sys.executable, args=args, env=child_env(proxied_gateway))
    async with Client(params, read_timeout_seconds=120) as client:
        resources = (await client.list_resources()).resources
        assert [str(r.uri) for r in resources] == ["rlguard://episode"]
        episode = json.loads((await client.read_resource("rlguard://episode")).contents[0].text)
        tools = [
            {
                "type": "function",
                "function": {"name": t.name, "description": t.description, "parameters": t.input_schema},
            }
            for t in (await client.list_tools()).tools
        ]
        model = AsyncOpenAI(base_url=episode["model_base_url"], api_key=episode["api_key"], max_retries=0)
        messages: list[dict[str, Any]] = [{"role": "user", "content": "Fix matrixlib so its tests pass."}]
        shown = []
        for _ in range(2):
            reply = await model.chat.completions.create(
                model="tiny", messages=messages, tools=tools, max_tokens=16
            )
            message = reply.choices[0].message
            shown.append(message.content or "")
            messages.append(message.model_dump(exclude_none=True))
            result = await client.call_tool("bash", {"command": "python3 -m pytest -q"})
            messages.append({"role": "user", "content": result.content[0].text})
        await client.call_tool("submit", {})
        await model.close()
    stored, rows = _rows(proxied_gateway, episode["episode_id"])
    assert stored.status == "finished" and stored.details["model_proxy"]["turns"] == 2
    assert stored.details["model_proxy"]["drift"] == 0 and len(rows) == 1
    _check_rows_are_what_the_engine_sampled(policy, rows, shown)


def test_rlguard_train_takes_a_step_on_harness_episodes(
    proxied_gateway: Gateway, tiny_model_dir: Path, tmp_path: Path
) -> None:
    store = Store.from_url(proxied_gateway.db_url)
    try:
        trainable = store.trainable_episodes(100)
    finally:
        store.close()
    if not trainable:
        pytest.skip("run with the harness tests above: they make the episodes this step trains on")
    env = {**os.environ, "PYTHONPATH": str(REPO), "RLGUARD_STATE_DIR": str(tmp_path)}
    run = subprocess.run(
        [sys.executable, "-m", "rlguard", "train", "--model", str(tiny_model_dir), "--steps", "1",
         "--episodes-per-step", "100", "--database-url", proxied_gateway.db_url,
         "--out", str(tmp_path / "run"), "--device", "cpu"],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert "1 step(s)" in run.stdout
    for item in trainable:
        consumed = [r.consumed_by_step for r in _rows(proxied_gateway, item.episode.id)[1]]
        assert consumed and all(step is not None for step in consumed), (item.episode.id, consumed)


def test_a_killed_harness_leaves_no_running_episode(gateway: Gateway, policy_version: str) -> None:
    """A mini-swe-agent environment in a process killed with SIGKILL (no exit hook runs): its
    presence connection closes and the gateway finishes the episode, saying why."""
    import json
    import time

    script = (
        "import json, os, signal\n"
        "from rlguard.integrations.mini_swe_agent import RlguardEnvironment\n"
        f"env = RlguardEnvironment(task={TASK_REF!r}, gateway_url={gateway.url!r}, "
        f"admin_token={gateway.admin_token!r}, policy_version={policy_version!r})\n"
        "env.execute({'command': 'ls'})\n"
        "print(json.dumps({'episode_id': env.episode_id}), flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), "MSWEA_SILENT_STARTUP": "1"}
    run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == -9, run.stderr[-2000:]
    episode_id = json.loads(run.stdout.strip().splitlines()[-1])["episode_id"]
    deadline = time.monotonic() + 120
    while True:
        with gateway.admin() as admin:
            episode = admin.get(f"/v1/episodes/{episode_id}").json()
        if episode["status"] != "running" or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert episode["status"] == "finished" and episode["reward"] is not None
    assert "connection closed" in episode["details"]["abandoned"]
    assert [c["tool"] for c in episode["tool_calls"]] == ["bash"]
