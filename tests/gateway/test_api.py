"""Every v1 endpoint against a running gateway with real sandboxes, the real guard and real grading."""

from __future__ import annotations

import hashlib

import httpx

from store.repository import Store
from tests.gateway.conftest import TASK, Gateway


def test_health_tools_and_tasks(gateway: Gateway) -> None:
    assert httpx.get(f"{gateway.url}/healthz").json()["status"] == "ok"
    tools = httpx.get(f"{gateway.url}/v1/tools").json()
    assert [t["function"]["name"] for t in tools] == [
        "bash",
        "read_file",
        "write_file",
        "edit_file",
        "list_dir",
        "submit",
    ]
    bash = tools[0]["function"]["parameters"]
    assert bash["required"] == ["command"] and bash["properties"]["timeout"]["type"] == "number"
    with gateway.admin() as admin:
        tasks = admin.get("/v1/tasks").json()
    assert TASK in {t["id"] for t in tasks}


def test_create_episode_stores_only_the_token_hash(gateway: Gateway) -> None:
    with gateway.admin() as admin:
        response = admin.post("/v1/episodes", json={"task": TASK, "policy_version": "v7"})
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"episode_id", "agent_token", "tools"}
    assert len(body["agent_token"]) >= 43  # 32 random bytes, URL-safe base64
    store = Store.from_url(gateway.db_url)
    try:
        row = store.episode(body["episode_id"])
    finally:
        store.close()
    assert row is not None and row.status == "running" and row.policy_version == "v7"
    assert row.agent_token_hash == hashlib.sha256(body["agent_token"].encode()).hexdigest()
    assert body["agent_token"] not in repr(row.__dict__)


def test_unknown_task_is_404(gateway: Gateway) -> None:
    with gateway.admin() as admin:
        response = admin.post("/v1/episodes", json={"task": "builtin/no-such-task"})
    assert response.status_code == 404 and "no-such-task" in response.json()["detail"]


def test_every_tool_answers_in_the_one_shape(episode) -> None:
    steps = [
        ("bash", {"command": "echo hi; echo err >&2; exit 3"}, "hi\nerr\n", 3),
        (
            "write_file",
            {"path": "notes/a.txt", "content": "alpha beta\n"},
            "Wrote 11 bytes to notes/a.txt",
            0,
        ),
        ("edit_file", {"path": "notes/a.txt", "old_str": "beta", "new_str": "gamma"}, None, 0),
        ("read_file", {"path": "notes/a.txt"}, "alpha gamma\n", 0),
        ("list_dir", {"path": "notes"}, "a.txt", 0),
        ("read_file", {"path": "missing.txt"}, "read_file: missing.txt: No such file or directory", 1),
        ("submit", {}, None, 0),
    ]
    for tool, arguments, output, exit_code in steps:
        response = episode.call(tool, **arguments)
        assert response.status_code == 200, response.text
        body = response.json()
        assert set(body) == {"output", "exit_code", "truncated"}
        assert body["exit_code"] == exit_code, (tool, body)
        if output is not None:
            assert body["output"] == output, (tool, body)


def test_edit_file_must_match_exactly_once(episode) -> None:
    episode.call("write_file", path="x.py", content="a = 1\na = 1\n")
    twice = episode.call("edit_file", path="x.py", old_str="a = 1", new_str="a = 2").json()
    assert twice["exit_code"] == 1 and "2 times" in twice["output"]
    absent = episode.call("edit_file", path="x.py", old_str="zzz", new_str="y").json()
    assert absent["exit_code"] == 1 and "not found" in absent["output"]
    assert episode.call("read_file", path="x.py").json()["output"] == "a = 1\na = 1\n"


def test_bash_timeout_and_truncation(episode) -> None:
    slow = episode.call("bash", command="sleep 5; echo never", timeout=1).json()
    assert slow["exit_code"] == 124 and "never" not in slow["output"]
    big = episode.call("bash", command="head -c 300000 /dev/zero | tr '\\0' x").json()
    assert big["truncated"] is True and len(big["output"]) < 300000


def test_unknown_episode_is_404_for_admin(gateway: Gateway) -> None:
    with gateway.admin() as admin:
        assert admin.get("/v1/episodes/nope").status_code == 404
        assert admin.post("/v1/episodes/nope/finish").status_code == 404
        call = admin.post("/v1/episodes/nope/calls", json={"tool": "bash", "arguments": {"command": "true"}})
        assert call.status_code == 404


def test_bad_calls_are_422_naming_the_problem(episode) -> None:
    with episode.client() as client:
        url = f"/v1/episodes/{episode.id}/calls"
        unknown = client.post(url, json={"tool": "rm_rf", "arguments": {}})
        assert unknown.status_code == 422 and "rm_rf" in unknown.json()["message"]
        missing = client.post(url, json={"tool": "bash", "arguments": {}})
        assert missing.status_code == 422 and "arguments.command" in missing.json()["message"]
        extra = client.post(url, json={"tool": "read_file", "arguments": {"path": "a", "mode": "rb"}})
        assert extra.status_code == 422 and "mode" in extra.json()["message"]
        wrong_type = client.post(
            url, json={"tool": "bash", "arguments": {"command": "true", "timeout": "soon"}}
        )
        assert wrong_type.status_code == 422 and "timeout" in wrong_type.json()["message"]
        not_json = client.post(url, content=b"{nope", headers={"content-type": "application/json"})
        assert not_json.status_code == 422
    with episode.gateway.admin() as admin:
        assert admin.get(f"/v1/episodes/{episode.id}").json()["num_calls"] == 0  # nothing recorded


def test_oversized_body_is_413_and_records_nothing(episode) -> None:
    payload = {"tool": "write_file", "arguments": {"path": "big.txt", "content": "x" * (1024 * 1024 + 10)}}
    with episode.client() as client:
        response = client.post(f"/v1/episodes/{episode.id}/calls", json=payload)
        assert response.status_code == 413

        def chunks():
            yield b'{"tool": "bash", "arguments": {"command": "'
            for _ in range(20):
                yield b"x" * 65536
            yield b'"}}'

        streamed = client.post(
            f"/v1/episodes/{episode.id}/calls", content=chunks(), headers={"content-type": "application/json"}
        )
        assert streamed.status_code == 413
    with episode.gateway.admin() as admin:
        assert admin.get(f"/v1/episodes/{episode.id}").json()["num_calls"] == 0


def test_sub_trajectory_upload_validates_and_is_summarised(gateway: Gateway, episode) -> None:
    url = f"/v1/episodes/{episode.id}/subtrajectories"
    good = {
        "index": 0,
        "token_ids": [1, 2, 3, 4],
        "action_mask": [0, 0, 1, 1],
        "logprobs": [0, 0, -0.5, -1.25],
    }
    with gateway.admin() as admin:
        created = admin.post(url, json={**good, "policy_version": "v-test"})
        assert created.status_code == 200 and created.json()["num_tokens"] == 4
        assert admin.post(url, json=good).status_code == 409
        uneven = admin.post(url, json={**good, "index": 1, "logprobs": [0.0]})
        assert uneven.status_code == 422 and "same length" in uneven.json()["message"]
        bad_mask = admin.post(url, json={**good, "index": 1, "action_mask": [0, 2, 1, 1]})
        assert bad_mask.status_code == 422 and "action_mask" in bad_mask.json()["message"]
        assert admin.post("/v1/episodes/nope/subtrajectories", json=good).status_code == 404
        view = admin.get(f"/v1/episodes/{episode.id}").json()
    assert view["sub_trajectories"] == [
        {
            "index": 0,
            "num_tokens": 4,
            "num_action_tokens": 2,
            "policy_version": "v-test",
            "trainable": True,
            "consumed_at": None,
            "consumed_by_step": None,
        }
    ]
    # the agent's own token may upload too (the runner may hold only that)
    with episode.client() as client:
        assert client.post(url, json={**good, "index": 1}).status_code == 200


def test_metrics_count_calls_by_action_and_category(gateway: Gateway, episode) -> None:
    episode.call("bash", command="echo metrics")
    episode.call("bash", command="curl -s https://github.com/org/repo/raw/main/solution.py")
    text = httpx.get(f"{gateway.url}/metrics").text
    assert 'rlguard_tool_calls_total{action="allow",category="",tool="bash"}' in text
    assert 'rlguard_tool_calls_total{action="decoy",category="answer_fetch",tool="bash"}' in text
    assert "rlguard_tool_call_seconds_bucket" in text
    assert "rlguard_live_sandboxes" in text and "rlguard_judge_errors_total" in text


def test_audit_intercepts_filters_and_pages(gateway: Gateway) -> None:
    ep = gateway.new_episode(policy_version="v-audit")
    ep.call("bash", command="echo ok")
    for i in range(3):
        ep.call("bash", command=f"curl -s https://github.com/acme/x{i}/raw/main/solution.py")
    ep.call("read_file", path="/reference/solution.py")
    with gateway.admin() as admin:

        def page(**params) -> dict:
            response = admin.get("/v1/audit/intercepts", params={"episode_id": ep.id, **params})
            assert response.status_code == 200, response.text
            return response.json()

        everything = page()
        assert len(everything["items"]) == 4 and everything["next_offset"] is None
        assert [i["seq"] for i in everything["items"]] == [4, 3, 2, 1]  # newest first
        assert {i["category"] for i in page(category="answer_fetch")["items"]} == {"answer_fetch"}
        assert len(page(category="hidden_test_access")["items"]) == 1
        assert len(page(stage="rules")["items"]) == 4 and page(stage="judge")["items"] == []
        assert len(page(policy_version="v-audit")["items"]) == 4
        assert page(policy_version="other")["items"] == []
        assert page(since="2999-01-01T00:00:00")["items"] == []
        first = page(limit=3)
        assert len(first["items"]) == 3 and first["next_offset"] == 3
        rest = page(limit=3, offset=first["next_offset"])
        assert [i["seq"] for i in rest["items"]] == [1] and rest["next_offset"] is None
        assert admin.get("/v1/audit/intercepts", params={"limit": 0}).status_code == 422
        assert admin.get("/v1/audit/intercepts", params={"since": "yesterday"}).status_code == 422


def test_arguments_may_be_openai_json_text(episode) -> None:
    with episode.client() as client:
        url = f"/v1/episodes/{episode.id}/calls"
        ok = client.post(url, json={"tool": "bash", "arguments": '{"command": "echo from-text"}'})
        assert ok.status_code == 200 and ok.json()["output"] == "from-text\n"
        bad = client.post(url, json={"tool": "bash", "arguments": "{not json"})
        assert bad.status_code == 422 and "not JSON" in bad.json()["message"]


def test_finish_records_the_runners_end_reason_and_rejects_unknown_ones(episode) -> None:
    with episode.client() as client:
        url = f"/v1/episodes/{episode.id}/finish"
        bad = client.post(url, json={"end_reason": "bored"})
        assert bad.status_code == 422
        done = client.post(url, json={"end_reason": "max_turns"})
        assert done.status_code == 200, done.text
        assert done.json()["details"]["end_reason"] == "max_turns"
    with episode.gateway.admin() as admin:
        assert admin.get(f"/v1/episodes/{episode.id}").json()["details"]["end_reason"] == "max_turns"
