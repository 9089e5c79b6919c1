"""Alembic environment: wq's own version table, batch mode on SQLite."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from wq.engine.models import Base
from wq.engine.schema import VERSION_TABLE, make_engine_for_migrations
from wq.types import load_all_models

load_all_models()


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        version_table=VERSION_TABLE,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
        # A migration that must run outside a transaction (CREATE INDEX CONCURRENTLY)
        # commits those before it: each migration is a transaction of its own.
        transaction_per_migration=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """Run against the connection handed in by wq, or the configured URL."""
    connection = context.config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = make_engine_for_migrations(context.config.get_main_option("sqlalchemy.url") or "")
    with engine.connect() as conn:
        _run(conn)
    engine.dispose()


if context.is_offline_mode():
    raise SystemExit("wq migrations run online only: use `wq db migrate`")
run_migrations_online()
