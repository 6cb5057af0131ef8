"""What commands open, each from the one settings object: suites by name, the store, the Docker
engine, a sandbox backend.

Every failure here is one clear error (``RlguardError``, ``StoreError``, ``SandboxError``,
``TaskError``) that the root prints as one line.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from rlguard.settings import Settings

if TYPE_CHECKING:
    import docker

    from sandbox.docker_backend import DockerBackend
    from store.repository import Store
    from tasks.suite_index import SuiteIndex


def suite_index(settings: Settings) -> SuiteIndex:
    """The suites known in the configured state directory."""
    from tasks.suite_index import SuiteIndex

    return SuiteIndex(settings.state_dir)


def resolve_suite(settings: Settings, name_or_dir: str) -> Path:
    """A suite's directory from its name (built-in or registered) or a directory."""
    return suite_index(settings).resolve(name_or_dir)


def resolve_suites(settings: Settings, names: Iterable[str]) -> tuple[str, ...]:
    """Suite directories as strings (what lower layers and other processes are handed)."""
    return tuple(str(resolve_suite(settings, name)) for name in names)


def database_url(settings: Settings, override: str | None = None) -> str:
    """``--database-url`` when given, else the configured one; checked for shape here."""
    from store.engine import parse_url

    url = override or settings.resolved_database_url
    parse_url(url)
    return url


def open_store(url: str, *, must_exist: bool = True) -> Store:
    """The store at ``url``, at the newest schema. ``must_exist``: a SQLite file that is not there
    is an error (commands that only read), not a new empty database."""
    from store.engine import sqlite_path
    from store.errors import StoreError
    from store.migrate import upgrade
    from store.repository import Store

    path = sqlite_path(url)
    if must_exist and path is not None and not path.is_file():
        raise StoreError(
            f"no database at {str(path)!r}: nothing was recorded there (rlguard db upgrade creates one)"
        )
    store = Store.open(url, must_exist=must_exist)
    try:
        upgrade(url)
    except BaseException:
        store.close()
        raise
    return store


def engine_client(settings: Settings) -> docker.DockerClient:
    """A docker SDK client for the configured engine, or one clear error when none answers."""
    import docker

    from sandbox.base import SandboxError
    from sandbox.docker_backend import resolve_docker_host

    url = resolve_docker_host(settings.docker_host)
    try:
        client = docker.DockerClient(base_url=url, version="auto", timeout=30)
        client.ping()
    except docker.errors.DockerException as exc:
        raise SandboxError(
            f"no Docker engine answers at {url} ({exc}); run scripts/ensure_docker.sh"
        ) from None
    return client


@contextlib.asynccontextmanager
async def local_backend(settings: Settings) -> AsyncIterator[DockerBackend]:
    """A Docker backend for the configured instance and engine (checked first), closed after use."""
    from sandbox.docker_backend import DockerBackend

    engine_client(settings).close()
    backend = DockerBackend.from_settings(settings)
    try:
        yield backend
    finally:
        await backend.close()


def check_engine_and_database(settings: Settings) -> None:
    """What a gateway needs before it starts: an engine that answers and a database it can migrate.

    With several engines (RLGUARD_SANDBOX__ENGINES) one that answers is enough: the fleet retries
    the others."""
    from store.migrate import upgrade

    if settings.sandbox.engines:
        _one_engine_answers(settings)
    else:
        engine_client(settings).close()
    upgrade(database_url(settings))


def _one_engine_answers(settings: Settings) -> None:
    from sandbox.base import SandboxError
    from sandbox.endpoint import EngineEndpoint

    problems = []
    for engine in settings.sandbox.engines:
        endpoint = EngineEndpoint(engine.url, engine.tls)
        try:
            endpoint.api_client(10).close()
            return
        except Exception as exc:  # the SDK's errors, requests' and the ssh client's alike
            problems.append(f"at {endpoint.url}: {exc}")
    raise SandboxError(f"no Docker engine answers {'; '.join(problems)}")
