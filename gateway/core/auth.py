"""Tokens: the admin token and per-episode agent tokens.

Agent tokens are 256-bit random and only their SHA-256 is stored, so a database dump opens no
episode; comparisons go through ``hmac.compare_digest`` so response time says nothing about how
much of a guessed token was right.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import sys
import time
from pathlib import Path

from gateway.settings import GatewayEnv

ADMIN_TOKEN_FILE = "admin_token"


def new_token() -> str:
    """A fresh 256-bit random token, URL-safe."""
    return secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def hashes_equal(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())


def ensure_admin_token(settings: GatewayEnv) -> str:
    """The admin token: from settings, else from ``state_dir/admin_token``, else generated there.

    A generated token is written with mode 0600 (created exclusively, never world-readable even for
    an instant) and printed once on stderr; later starts read the file and print nothing.
    """
    if settings.admin_token is not None and settings.admin_token.get_secret_value():
        return settings.admin_token.get_secret_value()
    path = Path(settings.state_dir) / ADMIN_TOKEN_FILE
    if path.exists():
        return path.read_text().strip()
    path.parent.mkdir(parents=True, exist_ok=True)
    token = new_token()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another process won the race: use its token
        return path.read_text().strip()
    with os.fdopen(fd, "w") as handle:
        handle.write(token + "\n")
    print(f"rlguard: generated admin token (saved to {path}): {token}", file=sys.stderr, flush=True)
    return token


class AuditSessions:
    """Browser sessions of the audit page: random tokens, revocable, expiring.

    Only their SHA-256 is kept (in memory: a gateway restart signs every browser out), so neither a
    stolen cookie outlives a logout nor does a cookie say anything about the admin token. At most
    ``max_sessions`` live at once; the oldest goes first.
    """

    def __init__(self, ttl_s: float = 12 * 3600, max_sessions: int = 1000) -> None:
        self.ttl_s = ttl_s
        self.max_sessions = max_sessions
        self._expiry: dict[str, float] = {}

    def open(self) -> str:
        """A new session's cookie value."""
        token = new_token()
        now = time.monotonic()
        self._expiry = {h: t for h, t in self._expiry.items() if t > now}
        while len(self._expiry) >= self.max_sessions:
            self._expiry.pop(next(iter(self._expiry)))
        self._expiry[hash_token(token)] = now + self.ttl_s
        return token

    def valid(self, cookie: str) -> bool:
        expiry = self._expiry.get(hash_token(cookie)) if cookie else None
        return expiry is not None and expiry > time.monotonic()

    def revoke(self, cookie: str) -> None:
        self._expiry.pop(hash_token(cookie), None)
