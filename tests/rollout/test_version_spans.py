"""Which policy version produced each generated span: recorded across a live weight swap."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from pydantic import ValidationError

from contract.trajectory import SubTrajectoryUpload
from rollout.policy import CompletionsPolicy, Sampling
from rollout.serving import serve_in_thread
from rollout.trajectory import SubTrajectory


def test_spans_merge_per_version_and_mark_mixed_rows() -> None:
    traj = SubTrajectory(index=0, policy_version="3")
    traj.add_context([1, 2])
    traj.add_generated([5, 6], [-0.1, -0.2])  # no version given: the row's own
    traj.add_context([9])
    traj.add_generated([7], [-0.3], "3")
    assert traj.version_spans == [[2, 6, "3"]] and not traj.mixed_version
    traj.add_generated([8, 8], [-0.4, -0.5], "4")
    assert traj.version_spans == [[2, 6, "3"], [6, 8, "4"]]
    assert traj.mixed_version and traj.versions == ["3", "4"]
    assert traj.to_record()["version_spans"] == [[2, 6, "3"], [6, 8, "4"]]


def test_upload_schema_checks_the_spans() -> None:
    base = {"index": 0, "token_ids": [1, 2, 3, 4], "action_mask": [0, 1, 1, 1], "logprobs": [0, -1, -1, -1]}
    assert SubTrajectoryUpload(**base, version_spans=[[1, 3, "0"], [3, 4, "1"]]).version_spans
    for bad in ([[3, 2, "0"]], [[1, 3, "0"], [2, 4, "1"]], [[1, 5, "0"]], [[1, 2, ""]]):
        with pytest.raises(ValidationError):
            SubTrajectoryUpload(**base, version_spans=bad)


def test_a_weight_swap_between_turns_makes_a_mixed_version_row(tiny_model_dir: Path) -> None:
    """The built-in server reports the version that served each completion; a reload between two
    generations of one episode (a partial rollout) leaves two spans of different versions."""
    from rollout.control import ReloadControl, new_token
    from rollout.hf_engine import HFEngine
    from rollout.policy_server import PolicyServer
    from rollout.settings import PolicyServerSettings

    token = new_token()  # reloads need the run's token and read only under its roots
    control = ReloadControl(token, (tiny_model_dir.parent,))
    server = PolicyServer(HFEngine(tiny_model_dir), "tiny", PolicyServerSettings(), control=control)
    with serve_in_thread(server.app, startup_timeout_s=120) as url:

        async def episode() -> SubTrajectory:
            policy = CompletionsPolicy(f"{url}/v1")
            traj = SubTrajectory(index=0, policy_version=policy.policy_version)
            traj.add_context([1, 2, 3])
            first = await policy.generate(traj.token_ids, Sampling(max_tokens=4, seed=1))
            traj.add_generated(first.token_ids, first.logprobs, first.policy_version)
            body = {"path": str(tiny_model_dir), "version": "7"}
            headers = {"Authorization": f"Bearer {token}"}
            reload = await asyncio.to_thread(
                httpx.post, f"{url}/reload_weights", json=body, headers=headers, timeout=120
            )
            assert reload.status_code == 200, reload.text
            traj.add_context([4])
            second = await policy.generate(traj.token_ids, Sampling(max_tokens=4, seed=2))
            traj.add_generated(second.token_ids, second.logprobs, second.policy_version)
            assert policy.policy_version == "7"  # later episodes start under the new version
            await policy.aclose()
            return traj

        traj = asyncio.run(episode())
    assert traj.versions == ["0", "7"] and traj.mixed_version


def test_without_a_reported_version_the_span_gets_the_version_at_request_time() -> None:
    """vLLM/SGLang answers carry no version: the weight sync's version read before the request."""
    app = FastAPI()
    served = {"version": "2"}

    @app.post("/v1/completions")
    async def completions() -> dict:
        served["version"] = "3"  # a swap lands while the request runs
        return {"choices": [{"token_ids": [5], "logprobs": {"token_logprobs": [-0.5]}, "text": "x"}]}

    with serve_in_thread(app) as url:
        policy = CompletionsPolicy(f"{url}/v1", version_source=lambda: served["version"])
        generation = asyncio.run(_generate_and_close(policy))
    assert generation.policy_version == "2"  # the older one: the span is never taken for fresher
    assert policy.policy_version == "3"


async def _generate_and_close(policy: CompletionsPolicy):
    try:
        return await policy.generate([1, 2], Sampling(max_tokens=1))
    finally:
        await policy.aclose()
