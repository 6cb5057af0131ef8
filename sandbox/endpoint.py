"""How to reach one Docker engine: the SDK client's arguments and a raw stream for exec attach.

Three transports, as the Docker CLI knows them: a unix socket, ``tcp://`` (with client-certificate
TLS when the engine runs ``--tlsverify``) and ``ssh://[user@]host[:port]``, where ``docker system
dial-stdio`` on the far side relays the engine's socket over the ssh session (the SDK does the
same with ``use_ssh_client``). The exec attach stream (``sandbox.attach``) needs the raw stream,
because the SDK's hijacked sockets are synchronous.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from sandbox.base import SandboxError
from sandbox.engines import TlsConfig

STREAM_LIMIT = 1 << 20
CONNECT_TIMEOUT_S = 15.0


@dataclass(frozen=True)
class EngineEndpoint:
    """An engine URL (``unix://``, ``tcp://``, ``ssh://``) and, for ``tcp://``, its TLS config."""

    url: str
    tls: TlsConfig | None = None

    @property
    def scheme(self) -> str:
        return urlparse(self.url).scheme

    def client_kwargs(self) -> dict[str, Any]:
        """Arguments of ``docker.DockerClient``/``APIClient`` for this engine."""
        kwargs: dict[str, Any] = {"base_url": self.url}
        if self.tls is not None:
            import docker.tls

            cert = None
            if self.tls.client_cert is not None and self.tls.client_key is not None:
                cert = (str(self.tls.client_cert), str(self.tls.client_key))
            verify: bool | str = str(self.tls.ca_cert) if self.tls.verify and self.tls.ca_cert else False
            kwargs["tls"] = docker.tls.TLSConfig(
                client_cert=cert, ca_cert=str(self.tls.ca_cert) if self.tls.ca_cert else None, verify=verify
            )
        if self.scheme == "ssh":
            kwargs["use_ssh_client"] = True  # the system ssh: its config, agent and known_hosts
        return kwargs

    def api_client(self, timeout_s: float, version: str | None = None, **extra: Any) -> Any:
        """A ``docker.DockerClient`` for this engine (its API version asked first when not given).

        ``trust_env`` is off: ``REQUESTS_CA_BUNDLE`` in the environment would otherwise replace the
        engine's CA (requests lets the environment override a session's ``verify``), and proxy
        variables meant for the web must not carry engine traffic (the Docker CLI ignores both).
        """
        import docker
        from docker.constants import MINIMUM_DOCKER_API_VERSION

        kwargs = self.client_kwargs()
        if version is None:
            probe = docker.APIClient(**kwargs, version=MINIMUM_DOCKER_API_VERSION, timeout=timeout_s)
            probe.trust_env = False
            try:
                version = str(probe.version(api_version=False)["ApiVersion"])
            finally:
                probe.close()
        client = docker.DockerClient(**kwargs, version=version, timeout=timeout_s, **extra)
        client.api.trust_env = False
        return client

    def ssl_context(self) -> ssl.SSLContext | None:
        """The client TLS context for the attach stream (None without TLS)."""
        if self.tls is None:
            return None
        context = ssl.create_default_context(cafile=str(self.tls.ca_cert) if self.tls.ca_cert else None)
        if not self.tls.verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if self.tls.client_cert is not None and self.tls.client_key is not None:
            context.load_cert_chain(str(self.tls.client_cert), str(self.tls.client_key))
        return context

    async def open_stream(
        self,
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, Callable[[], None]]:
        """A raw byte stream to the engine's API: reader, writer, and what closes it for good."""
        url = urlparse(self.url)
        try:
            if url.scheme == "unix":
                reader, writer = await asyncio.wait_for(
                    asyncio.open_unix_connection(url.path or url.netloc, limit=STREAM_LIMIT),
                    CONNECT_TIMEOUT_S,
                )
            elif url.scheme in ("tcp", "http", "https"):
                context = self.ssl_context()
                port = url.port or (2376 if context is not None else 2375)
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(
                        url.hostname,
                        port,
                        limit=STREAM_LIMIT,
                        ssl=context,
                        server_hostname=url.hostname if context is not None else None,
                    ),
                    CONNECT_TIMEOUT_S,
                )
            elif url.scheme == "ssh":
                return await self._ssh_stream()
            else:
                raise SandboxError(f"no transport for engine URLs like {self.url!r}")
        except (OSError, TimeoutError, ssl.SSLError) as exc:
            raise ConnectionError(f"cannot connect to the engine at {self.url}: {exc!r}") from exc
        return reader, writer, writer.close

    async def _ssh_stream(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, Callable[[], None]]:
        """``ssh host docker system dial-stdio``: its stdin and stdout are the engine's socket."""
        url = urlparse(self.url)
        argv = ["ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={int(CONNECT_TIMEOUT_S)}"]
        if url.port:
            argv += ["-p", str(url.port)]
        if url.username:
            argv += ["-l", url.username]
        argv += ["--", str(url.hostname), "docker", "system", "dial-stdio"]
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            limit=STREAM_LIMIT,
        )
        assert process.stdin is not None and process.stdout is not None

        def close() -> None:
            process.stdin.close()  # type: ignore[union-attr]
            with contextlib.suppress(ProcessLookupError):
                process.kill()

        return process.stdout, process.stdin, close
