"""On PostgreSQL, a transaction's `BEGIN` travels with its first statement.

psycopg sends `BEGIN` as a command of its own, and waits for its answer, before the
first statement of a transaction: a round trip that carries nothing. On connections
with the execution option `PIPELINED_BEGIN` (`pipelined_begin(engine)`), the first
statement of a transaction is sent in libpq's pipeline mode instead: `BEGIN`, the
statement and a sync go out together and their answers come back together, one
round trip. The statement behaves as it would otherwise: its rows, rowcount and
description are there when it returns, and its error is raised (and wrapped) by
SQLAlchemy as usual, leaving the transaction failed. Other statements, server-side
cursors, `COPY` and SQLite are left as they are.

A statement may also carry another one ahead of it (the execution option `AHEAD`,
an `Ahead`): both go out in one pipeline, the one ahead first, and its rows are kept
on the `Ahead` for the caller.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.pq import PipelineStatus, TransactionStatus
from sqlalchemy import Engine, TextClause, event
from sqlalchemy.orm import Session, sessionmaker

PIPELINED_BEGIN = "wq_pipelined_begin"
AHEAD = "wq_ahead"


@dataclass
class Ahead:
    """A statement sent in the same round trip as another, before it (`send_ahead`)."""

    statement: TextClause
    parameters: dict[str, Any]
    rows: list[tuple[Any, ...]] | None = field(default=None, init=False)  # once sent


def send_ahead(session: Session, ahead: Ahead) -> list[tuple[Any, ...]]:
    """The rows of `ahead`: sent now, on its own, unless a statement carried it
    (`execution_options={AHEAD: ahead}`) on a pipelined engine already."""
    if ahead.rows is None:
        ahead.rows = [tuple(row) for row in session.execute(ahead.statement, ahead.parameters)]
    return ahead.rows


def pipelined_begin(engine: Engine) -> Engine:
    """`engine` (sharing its pool) with `BEGIN` sent along with each transaction's first
    statement on PostgreSQL; `engine` itself where pipeline mode is not available."""
    if engine.dialect.driver != "psycopg" or not psycopg.Pipeline.is_supported():
        return engine
    if not event.contains(engine, "do_execute", _execute):
        event.listen(engine, "do_execute", _execute)
    return engine.execution_options(**{PIPELINED_BEGIN: True})


def _execute(cursor: Any, statement: str, parameters: Any, context: Any) -> bool:
    """Send a transaction's first statement with its `BEGIN`, and a statement with the
    one it carries ahead of it; False leaves it to the dialect."""
    options = context.execution_options
    ahead: Ahead | None = options.get(AHEAD)
    if ahead is None and not options.get(PIPELINED_BEGIN):
        return False
    if not isinstance(cursor, psycopg.Cursor) or isinstance(cursor, psycopg.ServerCursor):
        return False
    driver = cursor.connection
    pgconn = driver.pgconn
    if (
        driver.autocommit
        or pgconn.pipeline_status != PipelineStatus.OFF
        or (ahead is None and pgconn.transaction_status != TransactionStatus.IDLE)
    ):
        return False
    if ahead is None:
        with driver.pipeline():
            cursor.execute(statement, parameters or None)
        return True
    compiled = ahead.statement.compile(dialect=context.dialect)
    with driver.cursor() as before:
        with driver.pipeline():
            before.execute(compiled.string, compiled.construct_params(ahead.parameters))
            cursor.execute(statement, parameters or None)
        ahead.rows = [tuple(row) for row in before.fetchall()] if before.description else []
    return True


def pipelined_sessions(sessions: sessionmaker[Session]) -> sessionmaker[Session]:
    """`sessions` (same class, info and options) bound to `pipelined_begin` of its engine."""
    bind = sessions.kw.get("bind")
    if not isinstance(bind, Engine):
        return sessions
    return sessionmaker(class_=sessions.class_, **{**sessions.kw, "bind": pipelined_begin(bind)})
