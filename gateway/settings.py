"""The gateway's share of the ``RLGUARD_*`` environment, and the sections it reads from below.

``GatewaySettings`` is the gateway's own section (``RLGUARD_GATEWAY__*``); ``GatewayEnv`` adds the
admin token and the lower layers' sections the gateway wires together (sandbox engine, guard,
store), so ``create_app`` takes one typed object and never reads the environment itself.
"""

import socket
from typing import Literal

from pydantic import BaseModel, Field, SecretStr

from guard.settings import GuardEnv
from sandbox.settings import SandboxEnv
from store.settings import StoreEnv


class GatewaySettings(BaseModel):
    """Where the gateway listens, which tasks it serves and how long episodes may live."""

    host: str = Field("127.0.0.1", description="Listen address")
    port: int = Field(8765, gt=0, lt=65536, description="Listen port")
    max_body_bytes: int = Field(1024 * 1024, gt=0, description="Larger request bodies get 413")
    max_trajectory_body_bytes: int = Field(
        32 * 1024 * 1024, gt=0, description="Body limit of sub-trajectory uploads (token ids + logprobs)"
    )
    episode_idle_timeout_s: float = Field(600.0, gt=0, description="Episodes idle this long time out")
    episode_max_duration_s: float = Field(3600.0, gt=0, description="Episodes older than this time out")
    suites: list[str] = Field(
        default_factory=list,
        description="Task suites served (names or directories); empty: the built-in suites and every "
        "suite registered in the state directory (rlguard tasks build, rlguard tasks import)",
    )
    patch_review: Literal["zero", "flag"] = Field(
        "zero",
        description="What a final patch the guard finds tampering does to the reward: zero it, or flag it",
    )
    # -- the recording model proxy (/v1/episodes/{id}/model/v1): harnesses' model calls go through it
    policy_url: str | None = Field(
        None, description="OpenAI-compatible base URL (.../v1) the model proxy forwards to; unset: no proxy"
    )
    policy_model: str | None = Field(
        None, description="Model name sent to the policy server; default: the first of its /v1/models"
    )
    policy_tokenizer: str | None = Field(
        None,
        description="HF directory (or 'tiny') of the policy's tokenizer and chat template; "
        "default: the 'root' directory the policy server reports in /v1/models",
    )
    policy_api_key: SecretStr | None = Field(None, description="Bearer token for the policy server")
    proxy_max_body_bytes: int = Field(
        8 * 1024 * 1024, gt=0, description="Largest model request a harness may send through the proxy"
    )
    proxy_max_response_bytes: int = Field(
        16 * 1024 * 1024, gt=0, description="Largest answer the proxy reads from the policy server"
    )
    proxy_timeout_s: float = Field(600.0, gt=0, description="Time the policy server has for one turn")
    proxy_default_max_tokens: int = Field(
        1024, gt=0, description="max_tokens of a proxied turn when the harness gives none"
    )
    proxy_max_turns: int = Field(2000, gt=0, description="Model turns one episode may record")
    public_url: str = Field(
        "",
        description=(
            "Where other gateways and clients reach this gateway (named as the owner of its episodes "
            "in 421 answers); default: http://HOST:PORT it serves on"
        ),
    )
    lease_ttl_s: float = Field(
        30.0, ge=0.5, le=3600, description="Lease on each running episode, renewed every third of it"
    )
    lease_takeover_s: float = Field(
        60.0,
        ge=0,
        le=86400,
        description="How long another instance's lease must have lapsed before this gateway ends them",
    )


class GatewayEnv(SandboxEnv, GuardEnv, StoreEnv):
    """The admin token and the gateway's section, beside the sections of the layers it wires."""

    admin_token: SecretStr | None = Field(None, description="Admin bearer token; generated when unset")
    gateway: GatewaySettings = Field(default_factory=GatewaySettings)


def advertised_url(host: str, port: int) -> str:
    """The URL a gateway listening on ``host:port`` is reached at by others (its public_url when
    none is configured): a wildcard address is replaced by this host's name."""
    if host in ("", "0.0.0.0", "::"):
        host = socket.getfqdn()
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}"

