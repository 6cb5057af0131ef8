"""Episodes a person can see, against a real gateway whose model proxy serves the tiny model:
``GET /v1/episodes`` (filters, pages), the turn-by-turn view, ``rlguard episodes list|show``, and the
audit page's episode view in headless Chromium (screenshots in the test's output)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.policy_stack import SYSTEM, Ep, chat, new_episode

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[2]


def html_newlines(text: str) -> str:
    """``text`` as an HTML parser reads it: CR LF and lone CR become LF."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


NEWLINE_FIRST = "printf '\\nthe second line\\n'"  # an answer whose first character is a newline


def _admin(gw: Any) -> httpx.Client:
    return httpx.Client(base_url=gw.url, headers={"Authorization": f"Bearer {gw.admin_token}"}, timeout=120)


def _played(gw: Any, policy_version: str) -> tuple[Ep, Ep, Ep]:
    """Three episodes of one policy version: one with model turns and calls (a decoyed one among
    them), one without any model turn (audit-only), one left running."""
    trained, silent, running = (new_episode(gw, policy_version=policy_version) for _ in range(3))
    client = trained.openai()
    messages: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "Fix matrixlib."}]
    reply = chat(client, messages)
    assert trained.call("bash", command="python3 -m pytest -q").status_code == 200
    assert trained.call("bash", command="cat /reference/solution.py").status_code == 200
    assert trained.call("bash", command=NEWLINE_FIRST).status_code == 200
    messages += [
        reply.choices[0].message.model_dump(exclude_none=True),
        {"role": "user", "content": "Go on."},
    ]
    chat(client, messages)
    trained.finish()
    silent.finish()
    return trained, silent, running


@pytest.fixture(scope="module")
def played(proxy_gateway: Any) -> tuple[str, Ep, Ep, Ep]:
    version = f"views-{uuid.uuid4().hex[:8]}"
    return (version, *_played(proxy_gateway, version))


def test_the_episode_list_filters_and_pages(proxy_gateway: Any, played: tuple[str, Ep, Ep, Ep]) -> None:
    version, trained, silent, running = played
    with _admin(proxy_gateway) as admin:
        page = admin.get("/v1/episodes", params={"policy_version": version}).json()
        assert [i["episode_id"] for i in page["items"]] == [running.id, silent.id, trained.id]  # newest first
        by_id = {i["episode_id"]: i for i in page["items"]}
        assert by_id[trained.id]["sub_trajectories"] == 1 and by_id[trained.id]["drift"] == 0
        assert by_id[trained.id]["intercepts"] == 1 and by_id[trained.id]["num_calls"] == 3
        assert by_id[trained.id]["reward"] is not None and by_id[running.id]["status"] == "running"
        assert "did not call its model through" in by_id[silent.id]["audit_only"]
        finished = admin.get("/v1/episodes", params={"policy_version": version, "status": "finished"}).json()
        assert {i["episode_id"] for i in finished["items"]} == {trained.id, silent.id}
        trainable = admin.get("/v1/episodes", params={"policy_version": version, "trainable": "true"}).json()
        assert [i["episode_id"] for i in trainable["items"]] == [trained.id]
        first = admin.get("/v1/episodes", params={"policy_version": version, "limit": 2}).json()
        assert len(first["items"]) == 2 and first["next_offset"] == 2
        rest = admin.get("/v1/episodes", params={"policy_version": version, "limit": 2, "offset": 2}).json()
        assert [i["episode_id"] for i in rest["items"]] == [trained.id] and rest["next_offset"] is None
        assert admin.get("/v1/episodes", params={"status": "sleeping"}).status_code == 422
        assert admin.get("/v1/episodes", params={"since": "yesterday"}).status_code == 422
    assert httpx.get(f"{proxy_gateway.url}/v1/episodes", timeout=30).status_code == 401
    agent = httpx.get(
        f"{proxy_gateway.url}/v1/episodes", headers={"Authorization": f"Bearer {running.token}"}, timeout=30
    )
    assert agent.status_code == 401  # the same refusal as no token: no live-token oracle


def test_the_trajectory_view_shows_turns_calls_and_tests(
    proxy_gateway: Any, played: tuple[str, Ep, Ep, Ep]
) -> None:
    _, trained, _, _ = played
    with _admin(proxy_gateway) as admin:
        view = admin.get(f"/v1/episodes/{trained.id}/trajectory").json()
        assert admin.get("/v1/episodes/nope/trajectory").status_code == 404
    [sub] = view["sub_trajectories"]
    assert [t["kind"] for t in sub["turns"]] == ["first", "continued"]
    rows = trained.rows()
    assert [t["text"] for t in sub["turns"]] == [t["text"] for t in rows[0].turns]
    assert view["tests"] and set(view["tests"].values()) <= {"passed", "failed", "error", "skipped"}
    assert view["grading"]["status"] == "finished"
    calls = view["calls"]
    assert [c["command"] for c in calls] == [
        "python3 -m pytest -q",
        "cat /reference/solution.py",
        NEWLINE_FIRST,
    ]
    assert calls[2]["answer"]["output"] == "\nthe second line\n"
    assert calls[0]["touched"] is None and calls[1]["action"] == "decoy"
    assert "/reference/solution.py" in calls[1]["touched"]
    assert calls[1]["answer"]["output"] == "cat: /reference/solution.py: No such file or directory\n"
    assert view["model_proxy"]["turns"] == 2


def _cli(gw: Any, *args: str) -> str:
    env = {**os.environ, "RLGUARD_DATABASE_URL": gw.settings.resolved_database_url, "PYTHONPATH": str(REPO),
           "RLGUARD_STATE_DIR": str(gw.settings.state_dir), "COLUMNS": "220"}  # fmt: skip
    run = subprocess.run(
        [sys.executable, "-m", "rlguard", *args], env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return run.stdout


def test_rlguard_episodes_list_and_show(proxy_gateway: Any, played: tuple[str, Ep, Ep, Ep]) -> None:
    version, trained, silent, _ = played
    listed = json.loads(_cli(proxy_gateway, "episodes", "list", "--policy-version", version, "--json"))
    assert len(listed) == 3
    audit_only = json.loads(
        _cli(
            proxy_gateway,
            "episodes",
            "list",
            "--policy-version",
            version,
            "--audit-only",
            "--status",
            "finished",
            "--json",
        )
    )
    assert [i["episode_id"] for i in audit_only] == [silent.id]
    table = _cli(proxy_gateway, "episodes", "list", "--policy-version", version)
    assert trained.id in table and "audit-only" in table
    shown = _cli(proxy_gateway, "episodes", "show", trained.id[:10])
    assert f"episode {trained.id}" in shown
    assert "model turns" in shown and "cat /reference/solution.py" in shown and "decoy" in shown
    assert "hidden tests" in shown and "drift 0" in shown
    as_json = json.loads(_cli(proxy_gateway, "episodes", "show", trained.id, "--json"))
    assert as_json["episode"]["episode_id"] == trained.id


@pytest.fixture
def browser() -> Iterator[Any]:
    from tests.gateway.test_audit_page import browser as make_browser

    yield from make_browser.__wrapped__()


@pytest.mark.browser
def test_the_audit_page_shows_an_episode_turn_by_turn(
    proxy_gateway: Any, played: tuple[str, Ep, Ep, Ep], browser: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    _, trained, silent, _ = played
    browser.get(f"{proxy_gateway.url}/audit?token={proxy_gateway.admin_token}")
    WebDriverWait(browser, 30).until(EC.presence_of_element_located((By.ID, "episodes")))
    assert browser.find_element(By.ID, "reward-trend").is_displayed()
    assert browser.find_element(By.ID, "intercept-trend").find_elements(By.TAG_NAME, "circle")
    row = browser.find_element(By.CSS_SELECTOR, f'tr.episode[data-episode-id="{trained.id}"]')
    assert "1 sub-trajectories" in row.text
    silent_row = browser.find_element(By.CSS_SELECTOR, f'tr.episode[data-episode-id="{silent.id}"]')
    assert "audit only" in silent_row.text
    intercept = browser.find_element(By.CSS_SELECTOR, f'#intercepts a[href="/audit/episodes/{trained.id}"]')
    assert intercept.is_displayed()
    browser.save_screenshot(str(tmp_path / "audit.png"))

    row.find_element(By.CSS_SELECTOR, "a.ep").click()  # the id is a link to the episode's view
    WebDriverWait(browser, 30).until(EC.presence_of_element_located((By.ID, "trajectory")))
    assert browser.find_element(By.ID, "episode-head").get_attribute("data-episode") == trained.id
    turns = browser.find_elements(By.CSS_SELECTOR, "#trajectory tr.turn")
    assert [t.get_attribute("data-kind") for t in turns] == ["first", "continued"]
    texts = [t.find_element(By.CSS_SELECTOR, "pre.model-text").get_attribute("textContent") for t in turns]
    # the page shows each turn's text as stored, a leading newline included (HTML drops one newline
    # right after <pre>); the parser reads a carriage return as a newline, as every HTML page does
    assert texts == [html_newlines(t["text"]) for t in trained.rows()[0].turns]
    assert "hidden tests passed" in browser.find_element(By.ID, "tests-passed").text
    assert browser.find_element(By.ID, "drift").text == "0"
    decoy = browser.find_element(By.CSS_SELECTOR, 'tr.call-row[data-action="decoy"]')
    assert "cat /reference/solution.py" in decoy.find_element(By.CSS_SELECTOR, "pre.raw-call").text
    seen = decoy.find_element(By.CSS_SELECTOR, "pre.agent-saw").get_attribute("textContent")
    assert seen == "cat: /reference/solution.py: No such file or directory\n"
    last = browser.find_elements(By.CSS_SELECTOR, "tr.call-row")[-1]
    assert (
        last.find_element(By.CSS_SELECTOR, "pre.agent-saw").get_attribute("textContent")
        == "\nthe second line\n"
    )
    assert "/reference/solution.py" in decoy.find_element(By.CSS_SELECTOR, "pre.touched").get_attribute(
        "textContent"
    )
    shot = os.environ.get("RLGUARD_EPISODE_SCREENSHOT") or str(tmp_path / "episode.png")
    assert browser.save_screenshot(shot)

    browser.get(f"{proxy_gateway.url}/audit/episodes/{silent.id}")
    assert "did not call its model through" in browser.find_element(By.ID, "audit-only").text
    browser.get(f"{proxy_gateway.url}/audit/episodes/no-such-episode")
    assert browser.find_element(By.ID, "no-episode").is_displayed()
