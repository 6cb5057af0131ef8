"""Request dependencies: the app's services and the caller's identity.

Order of checks is fixed for every endpoint: the token must open the endpoint (401 otherwise),
then the endpoint looks the resource up (404) and checks its state (409).

Every token that does not open what it asks for gets the same 401 (same body, same header),
whether it is unknown, malformed, or a real agent token of this or another episode: answering a
valid agent token differently (403) would tell a caller holding a guessed or stolen string that
it is a live token. Only the admin token reaches a 404 for an unknown episode.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from gateway.core.auth import AuditSessions, hash_token, hashes_equal
from gateway.services.audit import AuditService
from gateway.services.episodes import EpisodeService

if TYPE_CHECKING:
    from gateway.services.model_proxy import ModelProxy
    from gateway.services.presence import PresenceWatch

bearer = HTTPBearer(auto_error=False, description="Admin token, or an episode's agent token")

UNAUTHORIZED = HTTPException(401, "missing or invalid bearer token", headers={"WWW-Authenticate": "Bearer"})


@dataclass(frozen=True)
class GatewayState:
    admin_hash: str
    episodes: EpisodeService
    audit: AuditService
    sessions: AuditSessions = field(default_factory=AuditSessions)
    proxy: ModelProxy | None = None  # the recording model proxy (None in apps built without one)
    presence: PresenceWatch | None = None  # finishes episodes whose harness connection closed


async def state(request: Request) -> GatewayState:
    """Async on purpose: FastAPI runs sync dependencies in a thread pool, a hop per request."""
    return request.app.state.gateway


Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]


def _token_hash(credentials: HTTPAuthorizationCredentials | None) -> str:
    if credentials is None or not credentials.credentials:
        raise UNAUTHORIZED
    return hash_token(credentials.credentials)


Gateway = Annotated[GatewayState, Depends(state)]
"""The app's services, as a route parameter: ``gw: Gateway``."""


async def require_admin(credentials: Credentials, gw: Gateway) -> None:
    """The admin token only; any other token, agent tokens included, is the one 401."""
    if not hashes_equal(_token_hash(credentials), gw.admin_hash):
        raise UNAUTHORIZED


async def require_episode_access(
    episode_id: str,
    credentials: Credentials,
    gw: Gateway,
) -> None:
    """The episode's own agent token, or the admin token; any other token is the one 401."""
    token_hash = _token_hash(credentials)
    if hashes_equal(token_hash, gw.admin_hash):
        return
    if not await gw.episodes.live.token_opens_episode(episode_id, token_hash):
        raise UNAUTHORIZED
