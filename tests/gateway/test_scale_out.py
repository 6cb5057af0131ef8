"""Many gateways on one PostgreSQL, sandboxes on two engines, and what happens when one part dies.

Everything is real: ``rlguard serve`` subprocesses, the shared PostgreSQL server, the main Docker
engine and a second dockerd (``scripts/ensure_second_engine.sh``) that one test SIGKILLs, an MCP
adapter run as its own process with its own in-process gateway.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import time
import uuid
from typing import Any

import httpx
import pytest
from mcp import Client, StdioServerParameters

from rollout.gateway_client import EpisodeHandle, GatewayClient
from store.repository import Store
from tests.gateway.conftest import Episode, Gateway, containers_of
from tests.integrations.conftest import REPO as REPO_ROOT
from tests.integrations.conftest import solution_files
from tests.support.engines import SecondEngine, ensure_second_engine, remove_instance

MAIN = "unix:///var/run/docker.sock"
FAST_LEASES = {"RLGUARD_GATEWAY__LEASE_TTL_S": "2", "RLGUARD_GATEWAY__LEASE_TAKEOVER_S": "2"}


def _view(gw: Gateway, episode_id: str) -> dict[str, Any]:
    with gw.admin() as admin:
        response = admin.get(f"/v1/episodes/{episode_id}")
    assert response.status_code == 200, response.text
    return response.json()


def _wait_ended(gw: Gateway, episode_id: str, within_s: float = 120) -> dict[str, Any]:
    deadline = time.monotonic() + within_s
    while True:
        view = _view(gw, episode_id)
        if view["status"] != "running":
            return view
        assert time.monotonic() < deadline, f"episode {episode_id} still running"
        time.sleep(0.3)


def _solve(episode: Episode) -> None:
    for path, content in solution_files().items():
        assert episode.call("write_file", path=path, content=content).status_code == 200


def _upload_one(gw: Gateway, episode_id: str) -> None:
    body = {"index": 0, "token_ids": [1, 2, 3], "action_mask": [0, 1, 1], "logprobs": [0.0, -0.5, -0.1]}
    with gw.admin() as admin:
        assert admin.post(f"/v1/episodes/{episode_id}/subtrajectories", json=body).status_code == 200


@pytest.mark.postgres
def test_two_gateways_share_one_postgres_and_an_adapter_gateway_touches_neither(
    spawn_gateway, pg_database, tmp_path
) -> None:
    """The issue's scenario: an adapter started without --gateway serves its own gateway in process,
    on the same database and instance name as a running ``rlguard serve``. It must not touch that
    gateway's live episodes; they still end with their real reward."""
    a, _ = spawn_gateway(pg_database)
    b, _ = spawn_gateway(pg_database, instance_name=f"{a.instance}-b")
    solved, left, other = a.new_episode(), a.new_episode(), b.new_episode()
    assert solved.call("read_file", path="/reference/solution.py").status_code == 200  # decoyed

    # a call or finish sent to the gateway that does not run the episode: 421, naming the owner
    wrong = httpx.post(
        f"{b.url}/v1/episodes/{solved.id}/calls",
        json={"tool": "bash", "arguments": {"command": "echo hi"}},
        headers={"Authorization": f"Bearer {solved.token}"},
    )
    assert wrong.status_code == 421
    assert (wrong.json()["owner"], wrong.json()["owner_url"]) == (a.instance, a.url)
    assert wrong.headers["location"] == f"{a.url}/v1/episodes/{solved.id}/calls"
    finish_elsewhere = httpx.post(
        f"{b.url}/v1/episodes/{solved.id}/finish", headers={"Authorization": f"Bearer {solved.token}"}
    )
    assert finish_elsewhere.status_code == 421
    # reads are answered by any gateway
    view = _view(b, solved.id)
    assert (view["status"], view["owner_instance"], view["owner_url"]) == ("running", a.instance, a.url)
    with b.admin() as admin:
        items = admin.get("/v1/audit/intercepts", params={"episode_id": solved.id}).json()["items"]
    assert [item["arguments"]["path"] for item in items] == ["/reference/solution.py"]

    # the runner's client follows the 421 to the owner (nothing ran on the wrong gateway)
    async def through_b() -> str:
        async with GatewayClient(b.url, b.admin_token) as client:
            result = await client.call(
                EpisodeHandle(solved.id, solved.token, []), "bash", {"command": "echo via-b"}
            )
            return result.output

    assert asyncio.run(through_b()) == "via-b\n"

    # the adapter's own gateway: same database, same instance name as A
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("RLGUARD_")},
        "PYTHONPATH": str(REPO_ROOT),
        "RLGUARD_STATE_DIR": str(tmp_path / "adapter"),
        "RLGUARD_DATABASE_URL": pg_database,
        "RLGUARD_INSTANCE": a.instance,
        "RLGUARD_SANDBOX__WARM_POOL_SIZE": "0",
    }
    args = ["-m", "rlguard", "mcp", "serve", "--task", "matrix-transpose", "--policy-version", "adapter"]

    async def adapter_session() -> None:
        params = StdioServerParameters(command=sys.executable, args=args, env=env)
        async with Client(params, read_timeout_seconds=120) as client:
            await client.call_tool("bash", {"command": "ls"})
            await client.call_tool("submit", {})

    asyncio.run(adapter_session())

    # A's episodes are live: they answer and end with their real rewards
    assert solved.call("bash", command="echo still-mine").json()["output"] == "still-mine\n"
    _solve(solved)
    _upload_one(b, solved.id)  # uploads go to any gateway
    assert solved.finish().json()["reward"] == 1.0
    left_reward = left.finish().json()["reward"]
    assert left_reward is not None and left_reward < 1.0
    assert other.finish().status_code == 200
    views = {ep.id: _view(a, ep.id) for ep in (solved, left, other)}
    assert {i: (v["status"], v["reward"] is not None) for i, v in views.items()} == {
        solved.id: ("finished", True),
        left.id: ("finished", True),
        other.id: ("finished", True),
    }
    store = Store.from_url(pg_database)
    try:
        adapter_rows = [e for e in store.trainable_episodes(100)]
        assert [t.episode.id for t in adapter_rows] == [solved.id]  # the one with a trajectory
    finally:
        store.close()
    with b.admin() as admin:
        exported = [json.loads(line) for line in admin.get("/v1/export").text.splitlines() if line]
    assert [(row["episode_id"], row["reward"]) for row in exported] == [(solved.id, 1.0)]


@pytest.mark.postgres
def test_a_killed_gateways_episodes_are_ended_by_another_with_their_real_state(
    spawn_gateway, pg_database, docker_client
) -> None:
    a_name, b_name = f"gwtest-a-{uuid.uuid4().hex[:6]}", f"gwtest-b-{uuid.uuid4().hex[:6]}"
    try:
        a, a_process = spawn_gateway(pg_database, instance_name=a_name, **FAST_LEASES)
        b, _ = spawn_gateway(pg_database, instance_name=b_name, **FAST_LEASES)
        solved, lost = a.new_episode(), a.new_episode()
        _solve(solved)
        assert (
            httpx.post(  # while A lives, B sends calls for A's episodes to A
                f"{b.url}/v1/episodes/{lost.id}/calls",
                json={"tool": "bash", "arguments": {"command": "true"}},
                headers={"Authorization": f"Bearer {lost.token}"},
            ).status_code
            == 421
        )
        lost_box = _view(a, lost.id)["sandbox_id"]
        a_process.kill()
        docker_client.containers.get(lost_box).remove(force=True)  # this sandbox dies with it

        solved_view, lost_view = _wait_ended(b, solved.id), _wait_ended(b, lost.id)
        # graded from the sandbox A left: the real reward, recorded as interrupted (never trained)
        assert (solved_view["status"], solved_view["reward"]) == ("interrupted", 1.0)
        assert solved_view["details"]["recovered_by"] == b_name
        assert solved_view["details"]["previous_owner"] == a_name
        assert (lost_view["status"], lost_view["reward"]) == ("infra_error", None)
        assert "sandbox is lost" in lost_view["details"]["infra_error"]
        late = httpx.post(
            f"{b.url}/v1/episodes/{lost.id}/calls",
            json={"tool": "bash", "arguments": {"command": "true"}},
            headers={"Authorization": f"Bearer {lost.token}"},
        )
        assert (late.status_code, late.json()["status"]) == (409, "infra_error")
        # nothing of the dead gateway is left on the engine (its warm sandbox included)
        deadline = time.monotonic() + 60
        while containers_of(docker_client, a_name) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert containers_of(docker_client, a_name) == []
    finally:
        remove_instance(MAIN, a_name)
        remove_instance(MAIN, b_name)


def test_a_killed_engine_ends_its_episodes_as_infra_errors_and_training_skips_them(
    spawn_gateway, docker_client, second_engine: SecondEngine
) -> None:
    """SIGKILL the second dockerd under a gateway using both engines: the call in flight there and
    every other episode there end as infra_error (nothing half-written), episodes on the main
    engine go on and are graded, the trainer reads only those, and once the engine is back the
    gateway removes what was lost there."""
    name = f"gwtest-fleet-{uuid.uuid4().hex[:6]}"
    engines = [
        {"url": MAIN, "name": "main", "max_sandboxes": 2, "warm_pool_size": 0},
        {"url": second_engine.url, "name": "two", "max_sandboxes": 8, "health_interval_s": 0.5},
    ]
    try:
        gw, _ = spawn_gateway(instance_name=name, RLGUARD_SANDBOX__ENGINES=json.dumps(engines))
        episodes = [gw.new_episode() for _ in range(4)]
        engine_of = {ep.id: _view(gw, ep.id)["sandbox_engine"] for ep in episodes}
        on_main = [ep for ep in episodes if engine_of[ep.id] == "main"]
        on_two = [ep for ep in episodes if engine_of[ep.id] == "two"]
        assert len(on_main) >= 1 and len(on_two) >= 2, engine_of
        for ep in episodes:
            assert ep.call("bash", command="echo before").status_code == 200

        in_flight: list[httpx.Response] = []
        thread = threading.Thread(
            target=lambda: in_flight.append(on_two[0].call("bash", command="sleep 6; echo too-late"))
        )
        thread.start()
        time.sleep(1.5)
        second_engine.kill()
        thread.join(timeout=60)
        assert (in_flight[0].status_code, in_flight[0].json()["status"]) == (409, "infra_error")

        for ep in on_two:
            view = _wait_ended(gw, ep.id, 60)
            assert (view["status"], view["reward"]) == ("infra_error", None)
            assert "two" in view["details"]["infra_error"]
            assert [c["answer"]["output"] for c in view["tool_calls"]] == ["before\n"]  # no half call
        with httpx.Client(base_url=gw.url) as client:
            engines_seen = {e["name"]: e["up"] for e in client.get("/healthz").json()["engines"]}
        assert engines_seen == {"main": True, "two": False}
        for ep in on_main:  # the other engine's episodes go on and are graded
            assert ep.call("bash", command="echo after").json()["output"] == "after\n"
            assert ep.finish().json()["details"]["status"] == "finished"

        for ep in episodes:  # every episode uploads its trajectory; training takes the clean ones
            _upload_one(gw, ep.id)
        store = Store.from_url(gw.db_url)
        try:
            assert {t.episode.id for t in store.trainable_episodes(100)} == {ep.id for ep in on_main}
        finally:
            store.close()

        ensure_second_engine()  # the engine comes back: what was lost there is removed
        deadline = time.monotonic() + 90
        lost = {_view(gw, ep.id)["sandbox_id"] for ep in on_two}
        while lost & set(second_engine.containers(name)) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not lost & set(second_engine.containers(name))
        with httpx.Client(base_url=gw.url) as client:
            deadline = time.monotonic() + 30
            while not all(e["up"] for e in client.get("/healthz").json()["engines"]):
                assert time.monotonic() < deadline
                time.sleep(0.3)
        fresh = gw.new_episode()
        assert fresh.call("bash", command="echo again").json()["output"] == "again\n"
    finally:
        if not second_engine.answers():
            ensure_second_engine()
        remove_instance(MAIN, name)
        remove_instance(second_engine.url, name)


@pytest.mark.postgres
def test_a_grading_longer_than_the_lease_is_not_taken_for_a_dead_gateway(spawn_gateway, pg_database) -> None:
    """Leases of 1 s, gradings of several: the owner renews the leases of what it grades, so its
    peer (same instance: it would claim a lapsed lease at once) never ends the episode under it."""
    short = {"RLGUARD_GATEWAY__LEASE_TTL_S": "1", "RLGUARD_GATEWAY__LEASE_TAKEOVER_S": "0"}
    a, _ = spawn_gateway(pg_database, **short)
    spawn_gateway(pg_database, **short)  # its peer sweeps for lapsed leases every 2/3 s
    episodes = [a.new_episode() for _ in range(3)]
    _solve(episodes[0])
    slow = (
        "printf 'import time\\ntime.sleep(3)\\n' | cat - matrixlib/__init__.py > /tmp/i"
        " && cp /tmp/i matrixlib/__init__.py"
    )
    for ep in episodes:  # every grading imports the package: each takes 3 s more than its lease
        assert ep.call("bash", command=slow).json()["exit_code"] == 0
    outcomes = [ep.finish().json() for ep in episodes]
    assert [o["details"]["status"] for o in outcomes] == ["finished"] * 3
    assert outcomes[0]["reward"] == 1.0
    assert all(_view(a, ep.id)["details"].get("recovered_by") is None for ep in episodes)
