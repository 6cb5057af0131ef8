"""Request dependencies: the app's services and the caller's identity.

Order of checks is fixed for every endpoint: authenticate (401), authorise (403), then the
endpoint looks the resource up (404) and checks its state (409).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from rlguard.gateway.auth import AuditSessions, hash_token, hashes_equal
from rlguard.gateway.services.audit import AuditService
from rlguard.gateway.services.episodes import EpisodeService

bearer = HTTPBearer(auto_error=False, description="Admin token, or an episode's agent token")

UNAUTHORIZED = HTTPException(401, "missing or invalid bearer token", headers={"WWW-Authenticate": "Bearer"})
FORBIDDEN = HTTPException(403, "this token does not open this resource")


@dataclass(frozen=True)
class GatewayState:
    admin_hash: str
    episodes: EpisodeService
    audit: AuditService
    sessions: AuditSessions = field(default_factory=AuditSessions)


async def state(request: Request) -> GatewayState:
    """Async on purpose: FastAPI runs sync dependencies in a thread pool, a hop per request."""
    return request.app.state.gateway


def _token_hash(credentials: HTTPAuthorizationCredentials | None) -> str:
    if credentials is None or not credentials.credentials:
        raise UNAUTHORIZED
    return hash_token(credentials.credentials)


async def require_admin(
    credentials: HTTPAuthorizationCredentials | None = Depends(bearer), gw: GatewayState = Depends(state)
) -> None:
    token_hash = _token_hash(credentials)
    if hashes_equal(token_hash, gw.admin_hash):
        return
    if await gw.episodes.is_agent_token(token_hash):
        raise FORBIDDEN
    raise UNAUTHORIZED


async def require_episode_access(
    episode_id: str,
    credentials: HTTPAuthorizationCredentials | None = Depends(bearer),
    gw: GatewayState = Depends(state),
) -> None:
    """The episode's own agent token, or the admin token."""
    token_hash = _token_hash(credentials)
    if hashes_equal(token_hash, gw.admin_hash):
        return
    opens = await gw.episodes.token_opens_episode(episode_id, token_hash)
    if opens is None:
        raise UNAUTHORIZED
    if not opens:
        raise FORBIDDEN
