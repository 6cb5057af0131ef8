"""The ``rlguard`` command line: one module per command group, registered on one root app."""

from rlguard.cli.app import app, main

__all__ = ["app", "main"]
