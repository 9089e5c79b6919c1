"""The API's hot reads straight through the driver on PostgreSQL.

SQLAlchemy's execution of a cached Core select costs about 0.1 ms of CPU per statement
beyond psycopg's own (an execution context, events, a result and its row processing):
a third of GET item's CPU, and a page's rows read slower through SQLAlchemy's `Row`
than through a tuple. The statements of `wq.daemon.reads` select only columns that
psycopg returns as SQLAlchemy would on PostgreSQL (UUIDs, aware timestamps, JSONB,
text, integers, booleans), so there each is compiled once and run on the session's own
connection with psycopg's cursor, its rows named tuples. A driver error is raised as
SQLAlchemy would raise it (`DBAPIError`), after discarding the pooled connections if
the connection broke, so outages are answered 503 like any other. SQLite goes through
SQLAlchemy: its UUIDs, timestamps and JSON need their types' processing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import psycopg
from psycopg.rows import namedtuple_row
from sqlalchemy import Select
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import Session

# Each statement's SQL for the PostgreSQL dialect, by statement: `reads` builds each
# shape once, so this holds one entry per shape.
_compiled: dict[Select[Any], str] = {}


def sql_of(statement: Select[Any], dialect: Dialect) -> str:
    """The SQL the driver is sent for `statement` (compiled once)."""
    sql = _compiled.get(statement)
    if sql is None:
        compiled = statement.compile(dialect=dialect)
        if compiled.literal_execute_params or compiled.post_compile_params:
            raise ValueError("a statement read through the driver cannot expand parameters")
        sql = _compiled[statement] = str(compiled)
    return sql


def fetch_all(session: Session, statement: Select[Any], params: Mapping[str, Any]) -> Sequence[Any]:
    """All rows of `statement` with `params` bound, as named tuples on PostgreSQL
    (SQLAlchemy rows elsewhere); both give the columns by name and by position."""
    connection = session.connection()
    dialect = connection.dialect
    if dialect.name != "postgresql":
        return session.execute(statement, params).all()
    sql = sql_of(statement, dialect)
    driver: psycopg.Connection[Any] = connection.connection.driver_connection  # type: ignore[assignment]
    try:
        with driver.cursor(row_factory=namedtuple_row) as cursor:
            cursor.execute(sql, params)
            return cursor.fetchall()
    except psycopg.Error as err:
        broken = driver.closed or driver.broken
        if broken:
            # As SQLAlchemy does on a disconnect: the server may have dropped every
            # connection (a restart), so the pooled ones go too, not one per request.
            connection.invalidate(err)
            connection.engine.dispose()
        raise sa_exc.DBAPIError.instance(
            sql, dict(params), err, psycopg.Error, connection_invalidated=broken
        ) from err
