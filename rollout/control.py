"""Who may drive a policy server's control endpoints (weight reload), and from where.

A policy server listens on loopback, where every local user can reach it. Without this, anyone
could ``POST /reload_weights`` a directory of their own under a version label of their choosing,
and a training run would sample from (and record as its own) weights it never trained. So:

* a **bearer token** per run, shared only with the trainer's weight sync (``trainer.reload``): the
  loop generates it and hands it to its child server through the environment, never argv or a log;
* every request without the exact token gets the **same** 401 (no hint whether a token was close,
  missing or the endpoint disabled); comparison is constant-time;
* a reload reads only a **directory under the run's checkpoint folder** (resolved: a link that
  leads out is refused), and a refusal never says whether a host path exists.

Servers without a token configured have no working control endpoints at all.
"""

from __future__ import annotations

import hmac
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path

TOKEN_ENV = "RLGUARD_ROLLOUT__POLICY__CONTROL_TOKEN"
MIN_TOKEN_CHARS = 16
MAX_PATH_CHARS = 4096
UNAUTHORIZED = "unauthorized"
REFUSED_PATH = "checkpoint refused: not a model directory under this server's reload roots"
REFUSED_LOAD = "checkpoint refused: it does not load as a model of this vocabulary (safetensors only)"


def new_token() -> str:
    """A fresh 256-bit token for one run."""
    return secrets.token_urlsafe(32)


def bearer(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, else None."""
    if not authorization:
        return None
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()


@dataclass(frozen=True)
class ReloadControl:
    """The token and the directories a server may reload from (both fixed when it starts)."""

    token: str = field(repr=False)
    roots: tuple[Path, ...] = ()

    def __post_init__(self) -> None:
        if len(self.token) < MIN_TOKEN_CHARS:
            raise ValueError(f"the control token must be at least {MIN_TOKEN_CHARS} characters")
        object.__setattr__(self, "roots", tuple(Path(os.path.realpath(r)) for r in self.roots))

    def authorized(self, authorization: str | None) -> bool:
        """Whether the header carries exactly this server's token (constant-time)."""
        given = bearer(authorization)
        return given is not None and hmac.compare_digest(given.encode(), self.token.encode())

    def checkpoint(self, path: str) -> Path | None:
        """The resolved directory to load, or None when it is not a directory under a root."""
        if not path or len(path) > MAX_PATH_CHARS or "\0" in path:
            return None
        resolved = Path(os.path.realpath(path))
        if not any(resolved != root and resolved.is_relative_to(root) for root in self.roots):
            return None
        return resolved if resolved.is_dir() else None
