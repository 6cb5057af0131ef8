"""Red team round 2 (issue 11), gateway findings, each written as the attack over real HTTP.

2: an agent making its workspace unexportable before ``finish``; 3: NUL bytes in output and files
(SQLite and the real PostgreSQL server); 5: terminal escapes reaching ``rlguard audit``; 9: JSON
nested 50k deep and ``since`` values that overflow; 10: the audit page's headers and session,
``list_dir`` names with newlines.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from gateway.app import create_app
from store.repository import Store
from tests.gateway.conftest import Episode, Gateway, gateway_settings, served
from trainer.data import load_step_data

pytestmark = pytest.mark.docker

SUB_TRAJECTORY = {
    "index": 0,
    "token_ids": [1, 2, 3, 4],
    "action_mask": [0, 0, 1, 1],
    "logprobs": [0, 0, -0.5, -1.0],
}

# Each sets up its workspace so the export used to fail, then lets ``finish`` run.
UNEXPORTABLE = {
    "chmod-000-file": "touch .cache && chmod 000 .cache",
    "over-the-cap": "head -c 70M /dev/zero > big.bin",
    "chmod-000-workspace": "chmod 000 /workspace",
}


def _attack_then_finish(episode: Episode, command: str) -> dict:
    assert episode.call("bash", command=command).status_code == 200
    with episode.client() as client:
        upload = client.post(f"/v1/episodes/{episode.id}/subtrajectories", json=SUB_TRAJECTORY)
        assert upload.status_code == 200, upload.text
    finished = episode.finish()
    assert finished.status_code == 200, finished.text
    return finished.json()


def test_an_unexportable_workspace_is_graded_and_trained_on(gateway: Gateway) -> None:
    episodes = {name: gateway.new_episode() for name in UNEXPORTABLE}
    with ThreadPoolExecutor(len(episodes)) as pool:
        answers = dict(
            zip(
                episodes,
                pool.map(lambda name: _attack_then_finish(episodes[name], UNEXPORTABLE[name]), episodes),
                strict=True,
            )
        )
    with gateway.admin() as admin:
        stored = {name: admin.get(f"/v1/episodes/{ep.id}").json() for name, ep in episodes.items()}
    for name, view in stored.items():
        answer = answers[name]
        assert view["status"] == "finished", (name, view["details"])
        assert view["reward"] is not None and (answer["reward"], answer["details"]) == (
            view["reward"],
            view["details"],
        )
    # Unreadable files are skipped by the export: the workspace is graded as it stands.
    assert "ungradable" not in stored["chmod-000-file"]["details"]
    for name in ("over-the-cap", "chmod-000-workspace"):
        assert stored[name]["reward"] == 0.0
        assert stored[name]["details"]["ungradable"].startswith("workspace export failed"), name
    store = Store.from_url(gateway.db_url)
    try:
        wanted = set()
        for episode in episodes.values():
            row = store.episode(episode.id, with_children=True)
            wanted |= {sub.id for sub in row.sub_trajectories}
        taken = set(load_step_data(store, max_episodes=10_000).record_ids)
    finally:
        store.close()
    assert wanted and wanted <= taken  # the trainer consumes all three


@pytest.fixture
def db_gateway(tmp_path: Path, db_url: str, docker_client):
    settings = gateway_settings(tmp_path, database_url=db_url, warm_pool_size=1)
    with served(create_app(settings)) as url:
        yield Gateway(url, settings.admin_token.get_secret_value(), db_url, settings.instance, settings)


def test_nul_bytes_are_answered_and_recorded_exactly(db_gateway: Gateway) -> None:
    episode = db_gateway.new_episode()
    printed = episode.call("bash", command="printf 'x\\0y'")
    assert printed.status_code == 200 and printed.json()["output"] == "x\0y"
    assert episode.call("write_file", path="nul.bin", content="a\0b\ue000c").status_code == 200
    read = episode.call("read_file", path="nul.bin")
    assert read.status_code == 200 and read.json()["output"] == "a\0b\ue000c"
    with db_gateway.admin() as admin:
        calls = admin.get(f"/v1/episodes/{episode.id}").json()["tool_calls"]
    assert [c["tool"] for c in calls] == ["bash", "write_file", "read_file"]
    assert calls[0]["answer"]["output"] == "x\0y"
    assert calls[1]["arguments"]["content"] == "a\0b\ue000c"
    assert calls[2]["answer"]["output"] == "a\0b\ue000c"


def test_deep_json_and_overflowing_since_are_client_errors(gateway: Gateway, episode: Episode) -> None:
    deep = "[" * 50_000 + "]" * 50_000
    headers = {"Authorization": f"Bearer {episode.token}", "Content-Type": "application/json"}
    url = f"{gateway.url}/v1/episodes/{episode.id}/calls"
    as_body = httpx.post(url, content='{"tool": "bash", "arguments": ' + deep + "}", headers=headers)
    as_text = httpx.post(url, content=json.dumps({"tool": "bash", "arguments": deep}), headers=headers)
    assert 400 <= as_body.status_code < 500 and 400 <= as_text.status_code < 500
    overflows = ("0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00")
    with gateway.admin() as admin:
        for since in overflows:
            assert admin.get("/v1/audit/intercepts", params={"since": since}).status_code == 422
    with httpx.Client(base_url=gateway.url, follow_redirects=True) as browser:
        assert browser.get("/audit", params={"token": gateway.admin_token}).status_code == 200
        for since in overflows:
            assert browser.get("/audit", params={"since": since}).status_code == 400
    assert episode.call("bash", command="echo alive").json()["output"] == "alive\n"


def test_audit_page_headers_and_a_session_that_logout_revokes(gateway: Gateway) -> None:
    cookies = []
    for _ in range(2):
        with httpx.Client(base_url=gateway.url, follow_redirects=True) as browser:
            page = browser.get("/audit", params={"token": gateway.admin_token})
            assert page.status_code == 200
            csp = page.headers["content-security-policy"]
            assert "default-src 'none'" in csp and "frame-ancestors 'none'" in csp and "script" not in csp
            assert page.headers["x-frame-options"] == "DENY"
            assert page.headers["referrer-policy"] == "no-referrer"
            cookies.append(browser.cookies["rlguard_audit"])
    assert cookies[0] != cookies[1]  # random per login, not derived from the admin token
    assert httpx.get(f"{gateway.url}/audit").headers["x-frame-options"] == "DENY"  # login page too
    stolen = cookies[0]
    assert httpx.get(f"{gateway.url}/audit", cookies={"rlguard_audit": stolen}).status_code == 200
    httpx.get(f"{gateway.url}/audit/logout", cookies={"rlguard_audit": stolen})
    assert httpx.get(f"{gateway.url}/audit", cookies={"rlguard_audit": stolen}).status_code == 401
    assert httpx.get(f"{gateway.url}/audit", cookies={"rlguard_audit": cookies[1]}).status_code == 200


def test_list_dir_names_cannot_forge_entries(episode: Episode) -> None:
    made = episode.call("bash", command="mkdir d && touch d/$'evil\\nforged.py' d/$'t\\x1b[8m' d/plain")
    assert made.status_code == 200, made.text
    lines = episode.call("list_dir", path="d").json()["output"].split("\n")
    assert sorted(lines) == ["evil\\nforged.py", "plain", "t\\033[8m"]


CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def test_rlguard_audit_shows_escapes_as_text(gateway: Gateway, episode: Episode) -> None:
    hostile = "\x1b]0;owned\x07\x1b[8m\x9b2J"
    command = f"curl -s 'https://github.com/acme/x/raw/main/solution.py?{hostile}'"
    answer = episode.call("bash", command=command)
    assert answer.status_code == 200
    with gateway.admin() as admin:
        items = admin.get("/v1/audit/intercepts", params={"episode_id": episode.id}).json()["items"]
    assert items and "\x1b" in items[0]["normalized"]  # the attack reached the store
    env = {**os.environ, "RLGUARD_DATABASE_URL": gateway.db_url, "COLUMNS": "400"}
    shown = subprocess.run(
        [sys.executable, "-m", "rlguard", "audit", "--episode", episode.id],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert shown.returncode == 0, shown.stderr
    assert not CONTROLS.search(shown.stdout.replace("\n", "")), repr(shown.stdout)
    assert "\\x1b]0;owned\\x07" in shown.stdout
