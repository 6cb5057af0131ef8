"""``rlguard serve`` (the gateway) and ``rlguard db upgrade``."""

from __future__ import annotations

import typer

from rlguard.cli.output import group, line
from rlguard.settings import get_settings

DATABASE_URL_HELP = "Database URL (default: RLGUARD_DATABASE_URL, else SQLite in the state directory)"


def serve(
    host: str | None = typer.Option(None, "--host", help="Listen address (default: RLGUARD_GATEWAY__HOST)"),
    port: int | None = typer.Option(
        None,
        "--port",
        min=0,
        max=65535,
        help="Listen port; 0 picks a free one (default: RLGUARD_GATEWAY__PORT)",
    ),
    suite: list[str] = typer.Option(
        [],
        "--suite",
        help="A suite to serve, by name or directory (repeatable; default: the built-in suites and "
        "every suite built or imported into the state directory)",
    ),
) -> None:
    """Run the gateway until interrupted.

    The gateway is the HTTP API every harness talks to, the audit page and the metrics. It binds
    its port first, checks the Docker engine and the database, loads its suites, then prints its
    URL once it answers.
    """
    from gateway.app import create_app
    from gateway.core.logs import configure_json_logging
    from gateway.services.catalog import SuiteCatalog, served_suites
    from gateway.settings import advertised_url
    from rlguard.cli import serving
    from rlguard.cli.resources import check_engine_and_database

    settings = get_settings()
    sock = serving.bind(
        host or settings.gateway.host, settings.gateway.port if port is None else port, "gateway"
    )
    try:
        suites = served_suites(suite or settings.gateway.suites, settings.state_dir)
        # a bad suite or engine or database is one line here, not a failed start
        catalog = SuiteCatalog(suites, settings.sandbox.limits, settings.sandbox.image)
        check_engine_and_database(settings)
        configure_json_logging()
        # the URL other gateways name in their 421 answers for this one's episodes
        bound_host, bound_port = sock.getsockname()[:2]
        settings.gateway.public_url = settings.gateway.public_url or advertised_url(bound_host, bound_port)
        names = ", ".join(path.name for path in suites)
        ready = f"rlguard gateway at {{url}} serving {names} (audit page: {{url}}/audit)"
        app = create_app(settings, catalog=catalog)
        serving.serve(app, sock, "gateway", ready, access_log=False, timeout_graceful_shutdown=10)
    finally:
        sock.close()


def db_upgrade(
    database_url: str | None = typer.Option(None, "--database-url", help=DATABASE_URL_HELP),
) -> None:
    """Create the database schema, or migrate it to the newest revision."""
    from rlguard.cli.resources import database_url as resolved_url
    from store.engine import redact
    from store.migrate import current_revision, upgrade

    url = resolved_url(get_settings(), database_url)
    upgrade(url)
    line(f"database {redact(url)} at revision {current_revision(url)}")


def register(app: typer.Typer) -> None:
    """Add ``serve`` and ``db upgrade``."""
    app.command("serve")(serve)
    db_app = group("The database schema (Alembic migrations).")
    db_app.command("upgrade")(db_upgrade)
    app.add_typer(db_app, name="db")
