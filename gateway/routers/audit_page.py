"""``/audit``: the server-rendered audit page (Jinja2, inline SVG chart, no front-end build).

A browser cannot send a bearer header, so the page accepts the admin token once (``?token=`` or
the login form) and then keeps a session cookie (HttpOnly, SameSite=Strict): a random session
token, revoked by logout and expiring, never derived from the admin token. Every answer carries
a strict Content-Security-Policy, ``X-Frame-Options: DENY`` and ``Referrer-Policy: no-referrer``
(the login URL may hold the token).
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from urllib.parse import parse_qs, urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates

from gateway.core.auth import hash_token, hashes_equal
from gateway.deps import GatewayState
from gateway.services.audit import parse_since
from gateway.services.episode_views import summary
from store.repository import EpisodeFilter, InterceptFilter, InterceptStats

router = APIRouter(include_in_schema=False)
templates = Jinja2Templates(directory=str(Path(__file__).resolve().parent.parent / "templates"))

COOKIE = "rlguard_audit"
PAGE_SIZE = 50
FILTERS = ("category", "stage", "episode_id", "policy_version", "since")
CATEGORIES = (
    "answer_fetch",
    "hidden_test_access",
    "git_history_leak",
    "test_tampering",
    "grader_tampering",
    "sandbox_escape",
    "unparseable",
)


SECURITY_HEADERS = {
    # Inline <style> and style attributes only: no script, no frames, no foreign anything.
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}


def _secured(response: Response) -> Response:
    response.headers.update(SECURITY_HEADERS)
    return response


def _gw(request: Request) -> GatewayState:
    return request.app.state.gateway


def _has_session(request: Request) -> bool:
    return _gw(request).sessions.valid(request.cookies.get(COOKIE, ""))


def _login_redirect(
    request: Request, token: str, target_query: dict[str, str], path: str = "/audit"
) -> Response:
    gw = _gw(request)
    if not hashes_equal(hash_token(token), gw.admin_hash):
        return _login_page(request, error="That token is not the admin token.")
    url = path + (f"?{urlencode(target_query)}" if target_query else "")
    response = RedirectResponse(url, status_code=303)
    response.set_cookie(
        COOKIE,
        gw.sessions.open(),
        max_age=int(gw.sessions.ttl_s),
        httponly=True,
        samesite="strict",
        path="/audit",
    )
    return _secured(response)


def _login_page(request: Request, error: str | None = None) -> Response:
    return _secured(templates.TemplateResponse(request, "login.html", {"error": error}, status_code=401))


secured = _secured
has_session = _has_session
login_page = _login_page
login_redirect = _login_redirect


@router.post("/audit/login")
async def login(request: Request) -> Response:
    body = await request.body()
    form = parse_qs(body.decode("utf-8", errors="replace"))
    return _login_redirect(request, form.get("token", [""])[0].strip(), {})


@router.api_route("/audit/logout", methods=["GET", "POST"])
async def logout(request: Request) -> Response:
    """End this browser's session for good: the cookie is revoked on the server, not only dropped."""
    _gw(request).sessions.revoke(request.cookies.get(COOKIE, ""))
    response = RedirectResponse("/audit", status_code=303)
    response.delete_cookie(COOKIE, path="/audit")
    return _secured(response)


def _parse_since(value: str) -> datetime | None:
    """None for no filter; ValueError for a value that is not a time or leaves the UTC range."""
    return parse_since(value) if value else None


def _chart(stats: InterceptStats) -> dict[str, object]:
    """Bar geometry for the inline SVG: intercept rate per policy version."""
    rows = stats.by_policy_version
    bar_w, gap, height = 48, 16, 160
    bars = []
    for i, row in enumerate(rows):
        h = round(row.rate * height, 1)
        bars.append(
            {
                "x": 40 + i * (bar_w + gap),
                "y": 10 + height - h,
                "w": bar_w,
                "h": h,
                "label": row.key or "(none)",
                "rate": f"{row.rate:.1%}",
                "detail": f"{row.intercepted}/{row.calls}",
            }
        )
    return {"bars": bars, "width": 60 + len(rows) * (bar_w + gap), "height": height, "base": 10 + height}


RECENT_EPISODES = 25
TREND_EPISODES = 200


def _trend(values: list[float], label: str, top: float = 1.0) -> dict[str, object]:
    """Points (one per episode, oldest left) and a moving average, as inline-SVG geometry."""
    width, height, left, base = 560, 120, 34, 130
    step = (width - left - 10) / max(len(values) - 1, 1)
    scale = top if top > 0 else 1.0

    def y(v: float) -> float:
        return round(base - max(0.0, min(v / scale, 1.0)) * height, 1)

    points = [{"x": round(left + i * step, 1), "y": y(v), "v": f"{v:.3g}"} for i, v in enumerate(values)]
    window = max(1, min(10, len(values) // 4 or 1))
    averaged = [sum(values[max(0, i - window + 1) : i + 1]) / len(values[max(0, i - window + 1) : i + 1])
                for i in range(len(values))]  # fmt: skip
    line = " ".join(f"{p['x']},{y(a)}" for p, a in zip(points, averaged, strict=True))
    return {"points": points, "line": line, "label": label, "top": f"{top:.3g}", "width": width,
            "base": base, "left": left, "window": window}  # fmt: skip


@router.get("/audit", response_class=HTMLResponse)
async def audit_page(request: Request) -> Response:
    params = {k: v.strip() for k, v in request.query_params.items() if k in (*FILTERS, "token", "page")}
    token = params.pop("token", None)
    if token is not None:
        return _login_redirect(request, token, {k: v for k, v in params.items() if v})
    if not _has_session(request):
        return _login_page(request)
    try:
        page = max(0, min(int(params.get("page", "0") or 0), 100_000))
    except ValueError:
        page = 0
    try:
        since = _parse_since(params.get("since", ""))
    except ValueError as exc:
        return _secured(PlainTextResponse(f"since: {exc}", status_code=400))
    filters = InterceptFilter(
        category=params.get("category") or None,
        stage=params.get("stage") or None,
        episode_id=params.get("episode_id") or None,
        policy_version=params.get("policy_version") or None,
        since=since,
    )
    gw = _gw(request)
    result = await gw.audit.intercepts(filters, PAGE_SIZE, page * PAGE_SIZE)
    stats = await gw.audit.stats()
    patch_reviews = await gw.audit.patch_reviews(False, PAGE_SIZE, 0)
    episodes = await gw.episodes.db.run(
        gw.episodes.db.store.list_episodes, EpisodeFilter(), limit=TREND_EPISODES
    )
    ended = [summary(e) for e in reversed(episodes) if e.episode.reward is not None]
    query = {k: v for k, v in params.items() if k in FILTERS and v}
    response = templates.TemplateResponse(
        request,
        "audit.html",
        {
            "items": result.items,
            "patch_reviews": patch_reviews.items,
            "episodes": [summary(e) for e in episodes[:RECENT_EPISODES]],
            "reward_trend": _trend([e.reward or 0.0 for e in ended], "reward"),
            "intercept_trend": _trend(
                [e.intercepts / e.num_calls if e.num_calls else 0.0 for e in ended],
                "intercepted share of calls",
            ),
            "filters": {k: params.get(k, "") for k in FILTERS},
            "categories": CATEGORIES,
            "stats": stats,
            "chart": _chart(stats),
            "page": page,
            "prev_url": f"/audit?{urlencode({**query, 'page': page - 1})}" if page > 0 else None,
            "next_url": f"/audit?{urlencode({**query, 'page': page + 1})}" if result.next_offset else None,
        },
    )
    return _secured(response)
