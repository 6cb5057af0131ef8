"""Alembic migrations: the only way rlguard's schema is created (SQLite and PostgreSQL)."""
