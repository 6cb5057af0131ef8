"""End to end through a real ``rlguard serve`` on PostgreSQL, then the CLI reads what it stored.

A client drives an episode exactly per the v1 API: it reads the task, cheats once (decoyed),
writes the reference fix, uploads its sub-trajectories and finishes; grading gives the reward;
``rlguard audit``, ``audit stats`` and ``export`` (JSONL and Parquet), and ``GET /v1/export``,
then show the same facts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tasks.spec import TaskRegistry
from tests.gateway.conftest import TASK


def _cli(db_url: str, *args: str) -> str:
    env = {**os.environ, "RLGUARD_DATABASE_URL": db_url, "COLUMNS": "250"}
    result = subprocess.run(
        [sys.executable, "-m", "rlguard", *args], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.postgres
def test_episode_end_to_end_then_audit_and_export(spawn_gateway, pg_database, tmp_path) -> None:
    gw, _ = spawn_gateway(pg_database)
    admin = {"Authorization": f"Bearer {gw.admin_token}"}
    with httpx.Client(base_url=gw.url, timeout=120) as http:
        assert TASK in [t["id"] for t in http.get("/v1/tasks", headers=admin).json()]
        created = http.post("/v1/episodes", json={"task": TASK, "policy_version": "step-3"}, headers=admin)
        assert created.status_code == 200
        episode_id, agent = (
            created.json()["episode_id"],
            {"Authorization": f"Bearer {created.json()['agent_token']}"},
        )

        def call(tool: str, **arguments) -> dict:
            response = http.post(
                f"/v1/episodes/{episode_id}/calls", json={"tool": tool, "arguments": arguments}, headers=agent
            )
            assert response.status_code == 200, response.text
            return response.json()

        assert "matrixlib/" in call("list_dir")["output"]
        call("bash", command="cat /reference/solution.py")  # the honeypot: decoyed
        for path, content in TaskRegistry(["builtin"]).get(TASK).solution_files().items():
            assert call("write_file", path=path, content=content)["exit_code"] == 0
        call("submit")
        for index in range(2):
            uploaded = http.post(
                f"/v1/episodes/{episode_id}/subtrajectories",
                json={
                    "index": index,
                    "token_ids": [10 + index, 11, 12],
                    "action_mask": [0, 1, 1],
                    "logprobs": [0.0, -0.5, -0.25],
                    "policy_version": "step-3",
                    # the second row is a partial rollout: its last token came from newer weights
                    "version_spans": [[1, 2, "step-3"], [2, 3, "step-4"]] if index else None,
                },
                headers=admin,
            )
            assert uploaded.status_code == 200
        finished = http.post(f"/v1/episodes/{episode_id}/finish", headers=agent)
        assert finished.status_code == 200
        assert finished.json()["reward"] == 1.0, finished.json()
        assert finished.json()["details"]["status"] == "finished" and finished.json()["details"]["tests"]
        assert http.post(f"/v1/episodes/{episode_id}/finish", headers=agent).status_code == 409
        late = http.post(
            f"/v1/episodes/{episode_id}/calls", json={"tool": "submit", "arguments": {}}, headers=agent
        )
        assert late.status_code == 409
        view = http.get(f"/v1/episodes/{episode_id}", headers=admin).json()
        assert (view["status"], view["reward"], view["policy_version"]) == ("finished", 1.0, "step-3")
        assert [c["tool"] for c in view["tool_calls"]][:2] == ["list_dir", "bash"]
        assert [s["num_action_tokens"] for s in view["sub_trajectories"]] == [2, 2]
        intercepts = http.get("/v1/audit/intercepts", params={"episode_id": episode_id}, headers=admin).json()
    assert [i["category"] for i in intercepts["items"]] == ["hidden_test_access"]
    assert intercepts["items"][0]["was_decoy"] and intercepts["next_offset"] is None

    table = _cli(pg_database, "audit", "--episode", episode_id)
    assert "hidden_test_access" in table and "/reference/solution.py" in table
    stats = json.loads(_cli(pg_database, "audit", "stats", "--json"))
    calls = 2 + len(TaskRegistry(["builtin"]).get(TASK).solution_files()) + 1
    assert stats["by_policy_version"]["step-3"] == {"calls": calls, "intercepted": 1, "rate": 1 / calls}

    jsonl = tmp_path / "out.jsonl"
    _cli(pg_database, "export", "--format", "jsonl", "--out", str(jsonl))
    rows = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert [(r["episode_id"], r["sub_index"]) for r in rows] == [(episode_id, 0), (episode_id, 1)]
    assert rows[1] == {
        "episode_id": episode_id,
        "sub_index": 1,
        "task": TASK,
        "policy_version": "step-3",
        "token_ids": [11, 11, 12],
        "action_mask": [0, 1, 1],
        "logprobs": [0.0, -0.5, -0.25],
        "reward": 1.0,
        "intercepts": 1,
        "decoyed_calls": 1,
        "status": "finished",
        "version_spans": [
            {"start": 1, "end": 2, "version": "step-3"},
            {"start": 2, "end": 3, "version": "step-4"},
        ],
        "is_last": True,
        "end_reason": None,
        "trainable": True,
        "drift": None,
        "prompt_ids": [11],
        "response_ids": [11, 12],
        "response_mask": [1, 1],
        "loss_mask": [1, 1],
        "response_logprobs": [-0.5, -0.25],
        "messages": None,
    }
    assert rows[0]["is_last"] is False
    assert rows[0]["version_spans"] is None  # one version made the whole row
    parquet = tmp_path / "out.parquet"
    _cli(pg_database, "export", "--format", "parquet", "--out", str(parquet))
    assert pq.read_table(parquet).to_pylist() == rows

    with httpx.Client(base_url=gw.url, headers=admin, timeout=120) as http:  # the same over HTTP
        streamed = http.get("/v1/export")
        assert streamed.headers["content-type"].startswith("application/x-ndjson")
        assert [json.loads(line) for line in streamed.text.splitlines()] == rows
        as_file = http.get("/v1/export", params={"format": "parquet"})
        assert pq.read_table(pa.BufferReader(as_file.content)).to_pylist() == rows
        assert http.get("/v1/export", params={"status": "running"}).status_code == 422
