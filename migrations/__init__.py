"""Alembic migrations of wq (installed as the `wq.migrations` package)."""
