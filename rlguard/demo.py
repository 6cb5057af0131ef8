"""``rlguard demo``: the main job on embedded defaults (SQLite, the local Docker engine)."""

import typer


def register(app: typer.Typer, bench: typer.Typer) -> None:
    """Add ``rlguard demo``."""
