"""Command-line sub-commands of this package (registered into ``rlguard.cli``)."""

import typer


def register(app: typer.Typer, bench: typer.Typer) -> None:
    """Add this package's commands to the root app and its benchmark to ``rlguard bench``."""
