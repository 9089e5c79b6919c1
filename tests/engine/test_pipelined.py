"""A transaction's BEGIN sent with its first statement (`wq.engine.pipelined`)."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest
from psycopg.pq import PipelineStatus, TransactionStatus
from sqlalchemy import exc, insert, select, text, update
from sqlalchemy.orm import sessionmaker

from tests.conftest import Store
from wq.engine.models import WorkItem
from wq.engine.pipelined import PIPELINED_BEGIN, pipelined_begin, pipelined_sessions


def driver_of(connection: Any) -> Any:
    return connection.connection.driver_connection


def test_the_first_statement_answers_as_usual_and_the_transaction_goes_on(store: Store) -> None:
    engine = pipelined_begin(store.engine)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT :x AS x"), {"x": 5}).all() == [(5,)]
        if store.dialect == "postgresql":
            driver = driver_of(conn)
            assert engine.get_execution_options()[PIPELINED_BEGIN]
            # Left in an ordinary transaction, out of pipeline mode.
            assert driver.info.transaction_status == TransactionStatus.INTRANS
            assert driver.pgconn.pipeline_status == PipelineStatus.OFF
        conn.execute(text("CREATE TEMP TABLE t (x int)"))
        conn.execute(text("INSERT INTO t VALUES (1), (2)"))
        conn.commit()
        # A first statement's rowcount and rows, and a first one that returns none.
        assert conn.execute(text("UPDATE t SET x = x + 1")).rowcount == 2  # type: ignore[attr-defined]
        conn.rollback()
        assert conn.execute(text("SELECT x FROM t WHERE x > 5")).all() == []
        conn.rollback()
        assert conn.execute(text("SELECT x FROM t ORDER BY x")).scalars().all() == [1, 2]


def test_a_failing_first_statement_raises_as_usual_and_rolls_back(store: Store) -> None:
    engine = pipelined_begin(store.engine)
    with engine.connect() as conn:
        with pytest.raises(exc.DBAPIError) as raised:
            conn.execute(text("SELECT x FROM no_such_table"))
        if store.dialect == "postgresql":
            assert isinstance(raised.value.orig, psycopg.errors.UndefinedTable)
        conn.rollback()
        assert conn.execute(text("SELECT 2")).scalar_one() == 2


def test_sessions_keep_their_info_and_their_transactions(store: Store) -> None:
    marker = object()
    base = sessionmaker(bind=store.engine, info={"marker": marker})
    sessions = pipelined_sessions(base)
    item_id = uuid.uuid4()
    row = {"id": item_id, "type": "chain", "project": "p", "phase": "active"}
    with sessions() as session:
        assert session.info["marker"] is marker
        session.execute(insert(WorkItem).values(**row))  # the first statement
        session.rollback()  # rolls back the transaction it began
    with store.sessions() as session:
        assert session.get(WorkItem, item_id) is None
    with sessions.begin() as session:
        session.execute(insert(WorkItem).values(**row))
        session.execute(update(WorkItem).where(WorkItem.id == item_id).values(attempts=2))
    with store.sessions() as session:
        assert (
            session.execute(select(WorkItem.attempts).where(WorkItem.id == item_id)).scalar_one()
            == 2
        )


def test_a_statement_can_refuse_the_pipeline(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """`PIPELINED_BEGIN: False` in a statement's own options: `BEGIN` goes first, alone."""
    if store.dialect != "postgresql":
        pytest.skip("SQLite: nothing is pipelined")
    seen: list[PipelineStatus] = []
    real_execute = psycopg.Cursor.execute

    def execute(self: psycopg.Cursor[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
        if str(query) == "SELECT 7":
            seen.append(self.connection.pgconn.pipeline_status)
        return real_execute(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", execute)
    sessions = pipelined_sessions(sessionmaker(bind=store.engine))
    for options, status in (
        ({}, PipelineStatus.ON),
        ({PIPELINED_BEGIN: False}, PipelineStatus.OFF),
    ):
        seen.clear()
        with sessions.begin() as session:
            assert session.execute(text("SELECT 7"), execution_options=options).scalar_one() == 7
        assert seen == [status]
