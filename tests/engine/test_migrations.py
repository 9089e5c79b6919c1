"""Migrations: empty → head on both databases, and the models match the schema."""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine, inspect, text

from tests.conftest import Store, throwaway_pg_database
from wq.engine import schema
from wq.engine.db import make_engine, make_sessionmaker
from wq.engine.failed_counts import failed_per_type
from wq.engine.models import Base
from wq.types import load_all_models


# Autogenerate cannot compare expression indexes (ix_work_items_claimable): checked below.
@pytest.mark.filterwarnings("ignore:.*expression-based index 'ix_work_items_claimable'")
@pytest.mark.filterwarnings("ignore:Skipped unsupported reflection of expression-based index")
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


def test_the_claimable_index_follows_the_claim_order(store: Store) -> None:
    """ix_work_items_claimable is on (coalesce(run_after, admitted_at), seq), partial."""
    if store.engine.dialect.name == "postgresql":
        query = "SELECT indexdef FROM pg_indexes WHERE indexname = 'ix_work_items_claimable'"
    else:
        query = "SELECT sql FROM sqlite_master WHERE name = 'ix_work_items_claimable'"
    with store.engine.connect() as conn:
        definition = " ".join(str(conn.execute(text(query)).scalar_one()).lower().split())
    assert "coalesce(run_after, admitted_at), seq)" in definition
    assert "admission" in definition and "admitted" in definition and "active" in definition


def test_no_index_holds_a_lease_column(store: Store) -> None:
    """A claim writes only the lease columns: with no index on them PostgreSQL can
    rewrite the row in place (test_claim_plan), and SQLite writes no index entry."""
    leased = {"lease_owner", "lease_token", "leased_until"}
    indexes = inspect(store.engine).get_indexes("work_items")
    assert indexes
    for index in indexes:
        assert not leased & set(index["column_names"]), index["name"]
        where = str(index.get("dialect_options", {}).get(f"{store.engine.dialect.name}_where", ""))
        assert not any(column in where for column in leased), index["name"]


@pytest.fixture(params=["sqlite", "postgresql"])
def private_engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    """A migrated database of this test's own: downgrading it touches no other test's."""
    with contextlib.ExitStack() as stack:
        if request.param == "sqlite":
            url = f"sqlite:///{tmp_path / 'private.db'}"
        else:
            url = stack.enter_context(throwaway_pg_database("wq_downgrade"))
        engine = make_engine(url, pool_size=1)
        stack.callback(engine.dispose)
        schema.upgrade(engine)
        yield engine


def test_downgrade_to_empty_and_back(private_engine: Engine) -> None:
    config = schema.alembic_config(private_engine)
    # As `schema.upgrade` runs them: each migration a transaction of its own.
    with private_engine.connect() as conn:
        config.attributes["connection"] = conn
        command.downgrade(config, "base")
        conn.commit()
    assert schema.current_revision(private_engine) is None
    with pytest.raises(schema.SchemaOutdated, match="wq db migrate"):
        schema.check_current(private_engine)
    schema.upgrade(private_engine)
    schema.check_current(private_engine)


def test_failed_items_already_there_are_counted_by_the_upgrade(private_engine: Engine) -> None:
    """0014 counts the failed items a database holds when it is upgraded, and its
    triggers count from then on."""
    config = schema.alembic_config(private_engine)
    with private_engine.connect() as conn:
        config.attributes["connection"] = conn
        command.downgrade(config, "0013")
        conn.commit()
    columns = (
        "id, type, project, phase, attempts, admission, lane, autonomous, created_at,"
        " updated_at, stamp"
    )
    sqlite = private_engine.dialect.name == "sqlite"
    rows = [
        (uuid.uuid4(), "mr" if k % 2 else "task", phase)
        for k, phase in enumerate(["failed", "failed", "failed", "completed", "active"])
    ]
    with private_engine.begin() as conn:
        for item_id, item_type, phase in rows:
            conn.execute(
                text(
                    f"INSERT INTO work_items ({columns}) VALUES (:id, :type, 'g/p', :phase, 0,"
                    " 'done', 'normal', false, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP, 0)"
                ),
                # As the Uuid column stores it: 32 hex digits on SQLite.
                {"id": item_id.hex if sqlite else item_id, "type": item_type, "phase": phase},
            )
    schema.upgrade(private_engine)
    sessions = make_sessionmaker(private_engine)
    with sessions() as session:
        assert failed_per_type(session, ["mr", "task"]) == {"mr": 1, "task": 2}
    with private_engine.begin() as conn:
        conn.execute(text("UPDATE work_items SET phase = 'failed' WHERE phase = 'active'"))
    with sessions() as session:
        assert failed_per_type(session, ["mr", "task"]) == {"mr": 1, "task": 3}


def test_project_names_stored_decomposed_are_composed_by_the_upgrade(
    private_engine: Engine,
) -> None:
    """0015 stores the names items were stored with before in NFC: an item whose project
    was typed with a combining accent joins the project typed precomposed (one queue,
    one pool), in its place in line; other names are left as they are."""
    config = schema.alembic_config(private_engine)
    with private_engine.connect() as conn:
        config.attributes["connection"] = conn
        command.downgrade(config, "0014")
        conn.commit()
    decomposed, composed = "e\u0301quipe/api", "\u00e9quipe/api"
    columns = (
        "id, type, project, phase, attempts, admission, lane, autonomous, created_at,"
        " updated_at, stamp, seq"
    )
    sqlite = private_engine.dialect.name == "sqlite"
    rows = [(decomposed, 1), (composed, 2), (decomposed, 3), ("g/p", 4)]
    with private_engine.begin() as conn:
        for project, seq in rows:
            conn.execute(
                text(
                    f"INSERT INTO work_items ({columns}) VALUES (:id, 'task', :project,"
                    " 'active', 0, 'queued', 'normal', false, CURRENT_TIMESTAMP,"
                    " CURRENT_TIMESTAMP, 0, :seq)"
                ),
                {
                    "id": uuid.uuid4().hex if sqlite else uuid.uuid4(),
                    "project": project,
                    "seq": seq,
                },
            )
    schema.upgrade(private_engine)
    with private_engine.connect() as conn:
        stored = conn.execute(text("SELECT project, seq FROM work_items ORDER BY seq")).all()
    assert [tuple(row) for row in stored] == [
        (composed, 1),
        (composed, 2),
        (composed, 3),
        ("g/p", 4),
    ]


def test_migrations_run_at_once_from_three_places_apply_each_step_once() -> None:
    """Two shells (or deploy jobs) running `wq db migrate` at once each applied the same
    migration: one failed half-way on an index or a column the other had just made."""
    with throwaway_pg_database("wq_migrate_race") as url:
        engines = [make_engine(url, pool_size=1) for _ in range(3)]
        failures: list[BaseException] = []
        start = threading.Barrier(len(engines))

        def migrate(engine: Engine) -> None:
            start.wait()
            try:
                schema.upgrade(engine)
            except BaseException as err:
                failures.append(err)

        threads = [threading.Thread(target=migrate, args=(engine,)) for engine in engines]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        try:
            assert failures == []
            assert schema.current_revision(engines[0]) == schema.head_revision(engines[0])
        finally:
            for engine in engines:
                engine.dispose()
