"""Migrations: empty → head on both databases, and the models match the schema."""

from __future__ import annotations

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect

from tests.conftest import Store
from wq.engine import schema
from wq.engine.models import Base
from wq.types import load_all_models


def test_head_is_current_and_models_match_schema(store: Store) -> None:
    assert schema.current_revision(store.engine) == schema.head_revision(store.engine)
    schema.check_current(store.engine)
    load_all_models()
    with store.engine.connect() as conn:
        context = MigrationContext.configure(
            conn, opts={"version_table": schema.VERSION_TABLE, "compare_type": True}
        )
        assert compare_metadata(context, Base.metadata) == []
    tables = set(inspect(store.engine).get_table_names())
    assert {
        "work_items",
        "work_item_statuses",
        "pending_events",
        "audit_log",
        schema.VERSION_TABLE,
    } <= tables
    assert "alembic_version" not in tables  # our own version table, shareable database


def test_downgrade_to_empty_and_back(store: Store) -> None:
    config = schema.alembic_config(store.engine)
    with store.engine.begin() as conn:
        config.attributes["connection"] = conn
        command.downgrade(config, "base")
    assert schema.current_revision(store.engine) is None
    try:
        schema.check_current(store.engine)
    except schema.SchemaOutdated as err:
        assert "wq db migrate" in str(err)
    else:
        raise AssertionError("an empty database must be refused")
    schema.upgrade(store.engine)
    schema.check_current(store.engine)
