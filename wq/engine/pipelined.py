"""On PostgreSQL, a transaction's `BEGIN` travels with its first statement.

psycopg sends `BEGIN` as a command of its own, and waits for its answer, before the
first statement of a transaction: a round trip that carries nothing. On connections
with the execution option `PIPELINED_BEGIN` (`pipelined_begin(engine)`), the first
statement of a transaction is sent in libpq's pipeline mode instead: `BEGIN`, the
statement and a sync go out together and their answers come back together, one
round trip. The statement behaves as it would otherwise: its rows, rowcount and
description are there when it returns, and its error is raised (and wrapped) by
SQLAlchemy as usual, leaving the transaction failed. Other statements, server-side
cursors, `COPY` and SQLite are left as they are, and so is a statement whose own
execution options set `PIPELINED_BEGIN` to False.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.pq import PipelineStatus, TransactionStatus
from sqlalchemy import Engine, event
from sqlalchemy.orm import Session, sessionmaker

PIPELINED_BEGIN = "wq_pipelined_begin"


def pipelined_begin(engine: Engine) -> Engine:
    """`engine` (sharing its pool) with `BEGIN` sent along with each transaction's first
    statement on PostgreSQL; `engine` itself where pipeline mode is not available."""
    if engine.dialect.driver != "psycopg" or not psycopg.Pipeline.is_supported():
        return engine
    if not event.contains(engine, "do_execute", _execute):
        event.listen(engine, "do_execute", _execute)
    return engine.execution_options(**{PIPELINED_BEGIN: True})


def _execute(cursor: Any, statement: str, parameters: Any, context: Any) -> bool:
    """Send a transaction's first statement with its `BEGIN`; False leaves it to the
    dialect."""
    if not context.execution_options.get(PIPELINED_BEGIN):
        return False
    if not isinstance(cursor, psycopg.Cursor) or isinstance(cursor, psycopg.ServerCursor):
        return False
    driver = cursor.connection
    pgconn = driver.pgconn
    if (
        driver.autocommit
        or pgconn.pipeline_status != PipelineStatus.OFF
        or pgconn.transaction_status != TransactionStatus.IDLE
    ):
        return False
    with driver.pipeline():
        cursor.execute(statement, parameters or None)
    return True


def pipelined_sessions(sessions: sessionmaker[Session]) -> sessionmaker[Session]:
    """`sessions` (same class, info and options) bound to `pipelined_begin` of its engine."""
    bind = sessions.kw.get("bind")
    if not isinstance(bind, Engine):
        return sessions
    return sessionmaker(class_=sessions.class_, **{**sessions.kw, "bind": pipelined_begin(bind)})
