"""Engine configurations: one typed config per kind of engine, a ``type`` discriminator, one factory.

The pattern of SWE-ReX's ``deployment/config.py``: each config names its kind in ``type`` (so a list
of them round-trips through JSON and the environment), and one factory
(``sandbox.factory.get_backend``) builds the backend of any kind, so reading settings imports no
engine client. Docker is the one kind today; a Kubernetes config would sit beside it
(``docs/scaling.md``) and the fleet would not change.

``RLGUARD_SANDBOX__ENGINES`` holds the list, as JSON objects or as plain engine URLs::

    RLGUARD_SANDBOX__ENGINES='["unix:///var/run/docker.sock", "ssh://rl@gpu-7"]'
    RLGUARD_SANDBOX__ENGINES='[{"url": "tcp://10.0.0.5:2376", "name": "node-5", "max_sandboxes": 96,
        "tls": {"ca_cert": "/etc/rlguard/ca.pem", "client_cert": "...", "client_key": "..."}}]'
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlparse

from pydantic import BaseModel, ConfigDict, Field, model_validator

ENGINE_SCHEMES = ("unix", "tcp", "ssh", "http", "https")


class TlsConfig(BaseModel):
    """Client-side TLS for a ``tcp://`` engine (dockerd ``--tlsverify``): the CA that signed the
    engine's certificate, and the client certificate and key the engine accepts."""

    model_config = ConfigDict(extra="forbid")

    ca_cert: Path | None = Field(None, description="CA certificate that signed the engine's certificate")
    client_cert: Path | None = Field(None, description="Client certificate (PEM)")
    client_key: Path | None = Field(None, description="Client key (PEM)")
    verify: bool = Field(True, description="Check the engine's certificate against ca_cert")

    @model_validator(mode="after")
    def _pairs(self) -> TlsConfig:
        if (self.client_cert is None) != (self.client_key is None):
            raise ValueError("tls: client_cert and client_key go together")
        if self.verify and self.ca_cert is None:
            raise ValueError("tls: verify needs ca_cert")
        return self


class DockerEngineConfig(BaseModel):
    """One Docker engine of the fleet: where it answers, how many sandboxes it may hold, its pool."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["docker"] = "docker"
    """Discriminator for (de)serialisation. Do not change."""
    url: str = Field(description="unix:///path, tcp://host:port (with tls) or ssh://[user@]host[:port]")
    name: str = Field("", description="Stable name stored with each episode (default: the URL)")
    tls: TlsConfig | None = Field(None, description="TLS for tcp:// engines")
    max_sandboxes: int = Field(128, ge=1, le=100_000, description="Sandboxes (warm ones included) at most")
    warm_pool_size: int | None = Field(
        None, ge=0, le=256, description="Warm sandboxes per key (default: the pool's)"
    )
    runtime: Literal["runc", "runsc"] | None = Field(
        None, description="OCI runtime here (default: the sandbox setting)"
    )
    health_interval_s: float = Field(5.0, gt=0, le=3600, description="Seconds between health pings")
    health_timeout_s: float = Field(3.0, gt=0, le=120, description="A ping slower than this failed")
    failures_to_down: int = Field(2, ge=1, le=100, description="Failed pings in a row that mark it down")

    @model_validator(mode="after")
    def _check(self) -> DockerEngineConfig:
        parsed = urlparse(self.url)
        if parsed.scheme not in ENGINE_SCHEMES:
            raise ValueError(
                f"engine url {self.url!r}: the scheme must be one of {', '.join(ENGINE_SCHEMES)}"
            )
        if parsed.scheme == "unix" and not parsed.path:
            raise ValueError(f"engine url {self.url!r} names no socket path")
        if parsed.scheme in ("tcp", "ssh", "http", "https") and not parsed.hostname:
            raise ValueError(f"engine url {self.url!r} names no host")
        if self.tls is not None and parsed.scheme not in ("tcp", "https"):
            raise ValueError(f"engine url {self.url!r}: tls applies to tcp:// engines only")
        if not self.name:
            self.name = self.url
        return self


EngineConfig = Annotated[DockerEngineConfig, Field(discriminator="type")]
"""Every kind of engine config (a union once there is a second kind). Useful for type hints."""


def engine_from_value(value: Any) -> Any:
    """A plain URL string stands for ``{"url": URL}`` (so a list of URLs is a valid engines list),
    and a config without ``type`` is a Docker engine's."""
    if isinstance(value, str):
        value = {"url": value}
    if isinstance(value, dict) and "type" not in value:
        value = {**value, "type": "docker"}
    return value
