"""Auth matrix: which token opens which endpoint; every token that does not open it gets one 401.

Round 3 (finding 4b): ``require_admin`` answered 403 to an agent token and 401 to an unknown one,
an oracle for which strings are live agent tokens; episode endpoints did the same with another
episode's token. Now the answers are byte-identical.
"""

from __future__ import annotations

import httpx
import pytest

from tests.gateway.conftest import Episode, Gateway

CALL = {"tool": "bash", "arguments": {"command": "true"}}
SUB = {"index": 50, "token_ids": [1], "action_mask": [1], "logprobs": [-0.1]}


@pytest.fixture(scope="module")
def two_episodes(gateway: Gateway) -> tuple[Episode, Episode]:
    return gateway.new_episode(), gateway.new_episode()


def _tokens(gateway: Gateway, own: Episode, other: Episode) -> dict[str, dict[str, str]]:
    return {
        "none": {},
        "malformed": {"Authorization": "Basic abc"},
        "wrong": {"Authorization": "Bearer not-a-real-token"},
        "own_agent": {"Authorization": f"Bearer {own.token}"},
        "other_agent": {"Authorization": f"Bearer {other.token}"},
        "admin": {"Authorization": f"Bearer {gateway.admin_token}"},
    }


# (method, path template, json body, {token kind: expected status})
MATRIX = [
    ("GET", "/v1/tasks", None, {"own_agent": 401, "admin": 200}),
    ("POST", "/v1/episodes", {"task": "builtin/none-such"}, {"own_agent": 401, "admin": 404}),
    ("GET", "/v1/episodes/{id}", None, {"own_agent": 401, "other_agent": 401, "admin": 200}),
    ("POST", "/v1/episodes/{id}/calls", CALL, {"own_agent": 200, "other_agent": 401, "admin": 200}),
    ("POST", "/v1/episodes/{id}/subtrajectories", SUB, {"own_agent": 200, "other_agent": 401}),
    ("POST", "/v1/episodes/unknown-id/calls", CALL, {"own_agent": 401, "admin": 404}),
    ("GET", "/v1/audit/intercepts", None, {"own_agent": 401, "admin": 200}),
    ("GET", "/v1/export", None, {"own_agent": 401, "admin": 200}),
]


@pytest.mark.parametrize(
    ("method", "path", "body", "expected"), MATRIX, ids=[f"{m} {p}" for m, p, *_ in MATRIX]
)
def test_auth_matrix(gateway: Gateway, two_episodes, method, path, body, expected) -> None:
    own, other = two_episodes
    tokens = _tokens(gateway, own, other)
    url = gateway.url + path.format(id=own.id)
    for kind in ("none", "malformed", "wrong"):
        response = httpx.request(method, url, json=body, headers=tokens[kind])
        assert response.status_code == 401, (kind, response.text)
        assert response.headers["www-authenticate"] == "Bearer"
    for kind, status in expected.items():
        response = httpx.request(method, url, json=body, headers=tokens[kind], timeout=60)
        assert response.status_code == status, (kind, response.text)
    # the oracle: whatever the token is, if it does not open the endpoint the answer is the same bytes
    refusals = {
        (r.status_code, r.text, r.headers.get("www-authenticate"))
        for kind in ("none", "malformed", "wrong", "own_agent", "other_agent")
        if expected.get(kind, 401) == 401
        for r in [httpx.request(method, url, json=body, headers=tokens[kind], timeout=60)]
    }
    assert len(refusals) == 1, refusals


def test_finish_refuses_another_episodes_token(gateway: Gateway, two_episodes) -> None:
    own, other = two_episodes
    response = httpx.post(
        f"{gateway.url}/v1/episodes/{own.id}/finish", headers={"Authorization": f"Bearer {other.token}"}
    )
    assert response.status_code == 401


def test_open_endpoints_need_no_token(gateway: Gateway) -> None:
    for path in ("/healthz", "/metrics", "/v1/tools"):
        assert httpx.get(gateway.url + path).status_code == 200


def test_audit_page_wants_the_admin_token(gateway: Gateway, two_episodes) -> None:
    own, _ = two_episodes
    assert httpx.get(f"{gateway.url}/audit").status_code == 401
    assert httpx.get(f"{gateway.url}/audit", params={"token": own.token}).status_code == 401
    assert httpx.get(f"{gateway.url}/audit", cookies={"rlguard_audit": "forged"}).status_code == 401
    with httpx.Client(base_url=gateway.url, follow_redirects=True) as browser:
        login = browser.get("/audit", params={"token": gateway.admin_token})
        assert login.status_code == 200 and "intercept rate per policy version" in login.text
        assert gateway.admin_token not in browser.cookies.get("rlguard_audit", "")


def test_audit_page_survives_bad_query_parameters(gateway: Gateway) -> None:
    with httpx.Client(base_url=gateway.url, follow_redirects=True) as browser:
        assert browser.get("/audit", params={"token": gateway.admin_token}).status_code == 200
        for params in (
            {"page": "abc"},
            {"page": "-5"},
            {"category": "<script>alert(1)</script>"},
            {"episode_id": "x" * 5000},
            {"policy_version": "\u2603"},
        ):
            response = browser.get("/audit", params=params)
            assert response.status_code == 200, params
            assert "<script>alert(1)</script>" not in response.text  # escaped
        bad_since = browser.get("/audit", params={"since": "not-a-time"})
        assert bad_since.status_code == 400 and "ISO 8601" in bad_since.text
