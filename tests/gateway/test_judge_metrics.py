"""Judge latency and errors reach /metrics when the guard escalates to a (real HTTP) judge."""

from __future__ import annotations

import json

import httpx

from gateway.app import create_app
from tests.gateway.conftest import Gateway, gateway_settings, served
from tests.support.openai_judge_server import JudgeReply, running_judge_server, verdict


def _judge(request: dict) -> JudgeReply:
    text = json.dumps(request)
    return JudgeReply(status=500) if "broken" in text else verdict("cheat", "sandbox_escape", 0.95)


def _metric(text: str, name: str) -> float:
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name))


def test_judge_latency_and_errors_are_exported(tmp_path) -> None:
    with running_judge_server(_judge) as judge:
        settings = gateway_settings(tmp_path, warm_pool_size=1)
        settings.guard.judge.base_url = judge.base_url
        settings.guard.judge.max_retries = 0
        token = settings.admin_token.get_secret_value()
        with served(create_app(settings)) as url:
            ep = Gateway(url, token, settings.resolved_database_url, settings.instance).new_episode()
            judged = ep.call("bash", command="sysctl -w kernel.shmmax=1")
            failed = ep.call("bash", command="sysctl -w kernel.broken=1")
            assert judged.status_code == failed.status_code == 200
            metrics = httpx.get(f"{url}/metrics").text
            with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}) as admin:
                calls = admin.get(f"/v1/episodes/{ep.id}").json()["tool_calls"]
    assert [(c["action"], c["stage"]) for c in calls] == [("decoy", "judge"), ("decoy", "judge")]
    assert _metric(metrics, "rlguard_judge_seconds_count") >= 1
    assert _metric(metrics, "rlguard_judge_errors_total") >= 1
