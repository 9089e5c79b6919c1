"""Hot reads straight through the driver on PostgreSQL.

SQLAlchemy's execution of a cached Core select costs about 0.1 ms of CPU per statement
beyond psycopg's own (an execution context, events, a result and its row processing):
a third of GET item's CPU, and a page's rows read slower through SQLAlchemy's `Row`
than through a tuple. For a select whose columns psycopg returns as SQLAlchemy would
on PostgreSQL (UUIDs, aware timestamps, JSONB, text, integers, booleans: the API's
pages and GET item, an MR submission's look at its branch), `fetch_all` compiles it
once and runs it on the session's own connection with psycopg's cursor, its rows
named tuples. A driver error is raised as SQLAlchemy would raise it (`DBAPIError`),
after discarding the pooled connections if the connection broke, so outages are
answered 503 like any other. SQLite goes through SQLAlchemy: its UUIDs, timestamps
and JSON need their types' processing."""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import psycopg
from psycopg.rows import namedtuple_row
from sqlalchemy import CompoundSelect, Select, TextClause
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Connection, Dialect
from sqlalchemy.orm import Session

# What can be compiled once and sent through the driver.
Statement = Select[Any] | CompoundSelect[Any] | TextClause
# Each statement's SQL for the PostgreSQL dialect and the values of the parameters it
# binds itself (a `limit(1)`'s), by statement. Callers build their statements once;
# one built per call would be compiled per call, and its entry go with it.
_compiled: weakref.WeakKeyDictionary[Statement, tuple[str, dict[str, Any]]] = (
    weakref.WeakKeyDictionary()
)


def compiled(statement: Statement, dialect: Dialect) -> tuple[str, dict[str, Any]]:
    """`statement`'s SQL for `dialect` and the values of the parameters it binds itself
    (compiled once per statement)."""
    found = _compiled.get(statement)
    if found is None:
        sql = statement.compile(dialect=dialect)
        if sql.literal_execute_params or sql.post_compile_params:
            raise ValueError("a statement read through the driver cannot expand parameters")
        own = {name: value for name, value in sql.params.items() if value is not None}
        found = _compiled[statement] = (str(sql), own)
    return found


def bound(
    statement: Statement, dialect: Dialect, params: Mapping[str, Any]
) -> tuple[str, Mapping[str, Any]]:
    """`statement`'s SQL for `dialect` and its parameters: its own with `params`."""
    sql, own = compiled(statement, dialect)
    return sql, ({**own, **params} if own else params)


def sql_of(statement: Select[Any], dialect: Dialect) -> str:
    """The SQL the driver is sent for `statement`."""
    return compiled(statement, dialect)[0]


@contextlib.contextmanager
def as_sqlalchemy_errors(
    connection: Connection, statement: str, params: Mapping[str, Any] | None = None
) -> Iterator[None]:
    """Driver errors of `statement`, run on `connection`'s own psycopg connection, raised
    as SQLAlchemy raises them (`DBAPIError`), so callers tell an outage from a bug.

    As SQLAlchemy does on a disconnect, a broken connection is discarded, and so are the
    pooled ones: the server may have dropped them all (a restart), and each would
    otherwise fail one more request.
    """
    driver = connection.connection.driver_connection
    try:
        yield
    except psycopg.Error as err:
        broken = bool(driver.closed or driver.broken)  # type: ignore[union-attr]
        if broken:
            connection.invalidate(err)
            connection.engine.dispose()
        raise sa_exc.DBAPIError.instance(
            statement,
            None if params is None else dict(params),
            err,
            psycopg.Error,
            connection_invalidated=broken,
            dialect=connection.dialect,
        ) from err


def fetch_all(session: Session, statement: Select[Any], params: Mapping[str, Any]) -> Sequence[Any]:
    """All rows of `statement` with `params` bound, as named tuples on PostgreSQL
    (SQLAlchemy rows elsewhere); both give the columns by name and by position."""
    connection = session.connection()
    dialect = connection.dialect
    if dialect.name != "postgresql":
        return session.execute(statement, params).all()
    sql, params = bound(statement, dialect, params)
    driver: psycopg.Connection[Any] = connection.connection.driver_connection  # type: ignore[assignment]
    cursor = driver.cursor(row_factory=namedtuple_row)
    with as_sqlalchemy_errors(connection, sql, params), cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()
