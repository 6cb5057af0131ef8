"""Trajectory store: SQLAlchemy models and data access (schema via Alembic migrations)."""
