"""A gateway served in this process on a loopback port (the demo, the benchmark, the tests).

The same ``create_app`` as ``rlguard gateway serve``; its lifespan (migrations, warm pool, expiry)
runs in the server thread and is shut down, sandboxes included, when the block ends.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from gateway.app import create_app
from gateway.core.auth import ensure_admin_token
from rlguard.settings import Settings
from rollout.serving import serve_in_thread


@dataclass(frozen=True)
class LocalGateway:
    url: str
    admin_token: str
    settings: Settings


@contextlib.contextmanager
def local_gateway(settings: Settings, **app_kwargs: Any) -> Iterator[LocalGateway]:
    """Serve a gateway for ``settings`` until the block ends; yields its URL and admin token."""

    token = ensure_admin_token(settings)
    app = create_app(settings, **app_kwargs)
    with serve_in_thread(app, startup_timeout_s=300) as url:
        app.state.gateway.episodes.leases.set_url(url)  # the port is known only now
        yield LocalGateway(url, token, settings)


def admin_token_from_settings(settings: Settings) -> str | None:
    """The admin token a separately started gateway uses: configured, or in ``state_dir``."""
    if settings.admin_token is not None and settings.admin_token.get_secret_value():
        return settings.admin_token.get_secret_value()
    path = settings.state_dir / "admin_token"
    return path.read_text().strip() if path.is_file() else None
