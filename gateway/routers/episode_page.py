"""``/audit/episodes/{id}``: one episode on the audit page, turn by turn (same sign-in as ``/audit``).

What the model wrote in each turn and the tool calls it emitted, the gateway call each became
(the raw call, the verdict, what the agent saw, and for an intercepted call what the real one would
have touched), the reward with the hidden tests, the patch review, and the model proxy's counts.
Server-rendered, no script (the audit page's Content-Security-Policy forbids any).
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from gateway.errors import EpisodeNotFound
from gateway.routers.audit_page import has_session, login_page, login_redirect, secured, templates
from gateway.routers.episode_views import views

router = APIRouter(include_in_schema=False)

TEXT_SHOWN = 4000  # characters of a text shown whole; longer ones fold the rest into <details>


def _clip(text: str | None) -> dict[str, str]:
    text = text or ""
    return {"head": text[:TEXT_SHOWN], "rest": text[TEXT_SHOWN:]}


@router.get("/audit/episodes/{episode_id}", response_class=HTMLResponse)
async def episode_page(episode_id: str, request: Request) -> Response:
    token = request.query_params.get("token")
    if token is not None:
        return login_redirect(request, token.strip(), {}, path=f"/audit/episodes/{episode_id}")
    if not has_session(request):
        return login_page(request)
    gw = request.app.state.gateway
    try:
        view = await views(gw).trajectory(episode_id)
    except EpisodeNotFound:
        return secured(
            templates.TemplateResponse(request, "episode.html", {"missing": episode_id}, status_code=404)
        )
    calls = {c.seq: c for c in view.calls}
    turns = [t for sub in view.sub_trajectories for t in sub.turns]
    matched = {seq for t in turns for seq in t.gateway_seqs if seq is not None}
    return secured(
        templates.TemplateResponse(
            request,
            "episode.html",
            {
                "missing": None,
                "view": view,
                "e": view.episode,
                "calls": calls,
                "unmatched": [c for c in view.calls if c.seq not in matched],
                "clip": _clip,
                "passed": sum(1 for o in view.tests.values() if o == "passed"),
            },
        )
    )
