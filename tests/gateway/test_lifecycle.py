"""Episode lifecycle under failure: idle and overlong episodes time out; SIGKILL loses no record."""

from __future__ import annotations

import threading
import time

import docker.errors
import httpx

from gateway.app import create_app
from store.repository import Store
from tests.gateway.conftest import Gateway, containers_of, gateway_settings, served


def _wait_for_status(client: httpx.Client, episode_id: str, status: str, within_s: float) -> dict:
    deadline = time.monotonic() + within_s
    while True:
        view = client.get(f"/v1/episodes/{episode_id}").json()
        if view["status"] == status or time.monotonic() > deadline:
            return view
        time.sleep(0.1)


def _status(client: httpx.Client, episode_id: str) -> str:
    return client.get(f"/v1/episodes/{episode_id}").json()["status"]


def _exists(docker_client, container_id: str) -> bool:
    try:
        docker_client.containers.get(container_id)
    except docker.errors.NotFound:
        return False
    return True


def test_idle_and_overlong_episodes_time_out_and_lose_their_sandbox(tmp_path, docker_client) -> None:
    settings = gateway_settings(
        tmp_path, warm_pool_size=0, episode_idle_timeout_s=2.0, episode_max_duration_s=4.0
    )
    with served(create_app(settings)) as url:
        gw = Gateway(
            url, settings.admin_token.get_secret_value(), settings.resolved_database_url, settings.instance
        )
        idle, busy = gw.new_episode(), gw.new_episode()
        with gw.admin() as admin:
            idle_box = admin.get(f"/v1/episodes/{idle.id}").json()["sandbox_id"]
            deadline = time.monotonic() + 8
            while (
                admin.get(f"/v1/episodes/{busy.id}").json()["status"] == "running"
                and time.monotonic() < deadline
            ):
                assert busy.call("bash", command="true").status_code in (200, 409)
                time.sleep(0.3)
            # Timed-out episodes are graded (their workspace as it stands), so this includes gradings.
            idle_view = _wait_for_status(admin, idle.id, "timed_out", 180)
            busy_view = _wait_for_status(admin, busy.id, "timed_out", 180)
        assert (idle_view["status"], idle_view["details"]["timeout"]) == ("timed_out", "idle")
        assert (busy_view["status"], busy_view["details"]["timeout"]) == ("timed_out", "max_duration")
        # Graded like finished episodes (so the trainer takes them), not left without a reward.
        assert idle_view["reward"] is not None and busy_view["reward"] is not None
        assert "ungradable" not in idle_view["details"] and "timings" in idle_view["details"]
        assert busy_view["num_calls"] >= 3  # it was active, yet ran past its maximum duration
        assert not _exists(docker_client, idle_box)
        assert idle.call("bash", command="true").status_code == 409
    assert containers_of(docker_client, settings.instance) == []


def test_sigkill_mid_episode_loses_no_committed_call(spawn_gateway, docker_client) -> None:
    gw, process = spawn_gateway(RLGUARD_GATEWAY__LEASE_TTL_S="2")
    ep = gw.new_episode()
    answers = []
    for i in range(12):
        command = f"echo call-{i}" if i % 4 else "curl -s https://github.com/acme/x/raw/main/solution.py"
        response = ep.call("bash", command=command)
        assert response.status_code == 200
        answers.append(response.json())
    with gw.admin() as admin:
        sandbox_id = admin.get(f"/v1/episodes/{ep.id}").json()["sandbox_id"]

    in_flight: list[object] = []

    def slow_call() -> None:
        try:
            in_flight.append(ep.call("bash", command="sleep 30; echo too-late"))
        except httpx.HTTPError as exc:
            in_flight.append(exc)

    thread = threading.Thread(target=slow_call)
    thread.start()
    time.sleep(1.0)
    process.kill()
    thread.join(timeout=30)
    assert isinstance(in_flight[0], httpx.HTTPError)  # the killed call never answered

    store = Store.from_url(gw.db_url)
    try:
        row = store.episode(ep.id, with_children=True)
    finally:
        store.close()
    assert row is not None and row.status == "running"  # nobody got to mark it
    recorded = [
        {"output": c.answer_output, "exit_code": c.answer_exit_code, "truncated": c.answer_truncated}
        for c in row.tool_calls
    ]
    assert recorded == answers  # every answered call, exactly as answered; nothing from the killed one
    assert [c.seq for c in row.tool_calls] == list(range(12)) and row.num_calls == 12
    assert sum(c.was_decoy for c in row.tool_calls) == 3
    assert _exists(docker_client, sandbox_id)  # the dead gateway could not clean up

    # The same instance, restarted: it ends the episode once its lease (2 s) has lapsed, graded
    # from the sandbox the dead process left (interrupted: recorded with its reward, not trained).
    restarted, _ = spawn_gateway(RLGUARD_GATEWAY__LEASE_TTL_S="2")
    with restarted.admin() as admin:
        view = _wait_for_status(admin, ep.id, "interrupted", 120)
    assert view["status"] == "interrupted" and len(view["tool_calls"]) == 12
    assert view["reward"] is not None and "timings" in view["details"]  # really graded
    assert view["details"]["recovered_by"] == gw.instance
    assert "stopped renewing its lease" in view["details"]["interrupted"]
    assert not _exists(docker_client, sandbox_id)  # destroyed after grading
    late = httpx.post(
        f"{restarted.url}/v1/episodes/{ep.id}/calls",
        json={"tool": "bash", "arguments": {"command": "true"}},
        headers={"Authorization": f"Bearer {ep.token}"},
    )
    assert late.status_code == 409
