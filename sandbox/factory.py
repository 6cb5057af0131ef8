"""The one factory from an engine config to its backend (the configs stay plain data)."""

from __future__ import annotations

from sandbox.base import SandboxError
from sandbox.docker_backend import DockerBackend
from sandbox.engines import DockerEngineConfig
from sandbox.settings import SandboxSettings


def get_backend(config: DockerEngineConfig, instance: str, settings: SandboxSettings) -> DockerBackend:
    """The backend driving the engine ``config`` names, with the fleet's sandbox settings and the
    engine's own overrides (its OCI runtime). Connects to the engine: raises SandboxError when it
    does not answer."""
    match config:
        case DockerEngineConfig():
            if config.runtime is not None:
                if "runtime" not in type(settings).model_fields:
                    raise SandboxError(f"engine {config.name!r}: this rlguard has no runtime option")
                settings = settings.model_copy(update={"runtime": config.runtime})
            return DockerBackend(instance, config.url, settings, name=config.name, tls=config.tls)
    raise SandboxError(f"no backend for engines of type {getattr(config, 'type', '?')!r}")
