"""The API's hot reads on the event loop, through psycopg's async driver (PostgreSQL).

A sync handler costs a hand-off to the thread pool and back and, under load, a contest
for the GIL between the event loop and the request threads. With GET item's work down
to two short statements (`wq.engine.driver_reads`), that was a third of its CPU. So
GET item and the list await their statements on the event loop instead, on an async
pool of connections (psycopg_pool) the app opens at start-up. On SQLite, and in an app
whose lifespan did not run, they run in the thread pool like the other handlers.

The bounds are the sync engine's: a connection is waited for, and a statement's answer
too, at most the answer timeout (a connection that did not answer is closed,
`TimedAsyncConnection`); `statement_timeout` is set on every connection. Errors are
raised as SQLAlchemy's (`DBAPIError`), so an outage is answered 503 and logged once
like any other, and a broken connection makes the pool check the others (a server
restart drops them all).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import psycopg
from psycopg.rows import namedtuple_row
from psycopg_pool import AsyncConnectionPool
from sqlalchemy import Select
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Dialect, Engine

from wq.engine.db import DatabaseNotAnswering, TimedAsyncConnection, Timeouts
from wq.engine.driver_reads import compiled


class LoopReads:
    """Selects awaited on the event loop, on a pool of async connections."""

    def __init__(self, pool: AsyncConnectionPool[Any], dialect: Dialect) -> None:
        self.pool = pool
        self.dialect = dialect

    async def fetch_all(self, statement: Select[Any], params: Mapping[str, Any]) -> Sequence[Any]:
        """All rows of `statement` with `params` bound, as named tuples."""
        sql, own = compiled(statement, self.dialect)
        bound = {**own, **params} if own else params
        try:
            async with self.pool.connection() as connection:
                try:
                    cursor = connection.cursor(row_factory=namedtuple_row)
                    await cursor.execute(sql, bound)
                    rows: list[Any] = await cursor.fetchall()
                    return rows
                except psycopg.OperationalError as err:
                    if connection.broken and not isinstance(err, DatabaseNotAnswering):
                        # As SQLAlchemy does on a disconnect: the others may be gone too.
                        # (Not on a hung server: each check would wait for it.)
                        await self.pool.check()
                    raise
        except psycopg.Error as err:
            raise sa_exc.DBAPIError.instance(sql, dict(bound), err, psycopg.Error) from err

    async def close(self) -> None:
        """Close every connection of the pool."""
        await self.pool.close()


@contextlib.asynccontextmanager
async def loop_reads(
    engine: Engine, timeouts: Timeouts, *, size: int
) -> AsyncIterator[LoopReads | None]:
    """`LoopReads` on `engine`'s database, if PostgreSQL, for the app's lifespan
    (None on SQLite). The pool holds up to `size` connections, opened as needed."""
    if engine.dialect.name != "postgresql":
        yield None
        return
    conninfo = engine.url.set(drivername="postgresql").render_as_string(hide_password=False)

    async def bounded(connection: TimedAsyncConnection) -> None:
        connection.answer_timeout = timeouts.answer_seconds

    pool = AsyncConnectionPool(
        conninfo,
        connection_class=TimedAsyncConnection,
        configure=bounded,
        min_size=1,
        max_size=size,
        open=False,
        timeout=timeouts.answer_seconds or 30.0,
        kwargs={"autocommit": True, **timeouts.connect_args()},
        name="wq-api-reads",
    )
    # Not waiting: the daemon checked the database at start-up, and a read that comes
    # before a connection does waits for it (or gives up, 503).
    await pool.open(wait=False)
    reads = LoopReads(pool, engine.dialect)
    try:
        yield reads
    finally:
        await reads.close()
