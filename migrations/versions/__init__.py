"""Alembic revisions (a package so that setuptools installs them)."""
