"""The API's hot reads on the event loop, through psycopg's async driver (PostgreSQL).

A sync handler costs a hand-off to the thread pool and back and, under load, a contest
for the GIL between the event loop and the request threads. With GET item's work down
to two short statements (`wq.engine.driver_reads`), that was a third of its CPU. So
GET item and the list await their statements on the event loop instead, on async
connections the app's lifespan keeps (`ConnectionSlots`); GET item's two in one round
trip (`fetch_each`). Unchanged submissions use the same connections for their short
transaction (`wq.daemon.loop_submit`). On SQLite, and in an app whose lifespan did not
run, they run in the thread pool like the other handlers.

The bounds are the sync engine's: a statement's answer is waited for at most the
answer timeout (a connection that did not answer is closed, `TimedAsyncConnection`),
a new connection at most the connect timeout, a free connection at most the answer
timeout; `statement_timeout` is set on every connection. Errors are raised as
SQLAlchemy's (`DBAPIError`), so an outage is answered 503 and logged once like any
other, and a broken connection discards the idle ones (a server restart drops them
all).

The connections are opened when the app starts, each having looked once at every
table: a new PostgreSQL backend reads a table's catalog entries on first use, and a
burst of requests on a daemon that has just started waited for both (50-100 ms at the
p99 of its first tenth of a second under the API benchmark's load, against 3-7 ms once
warm). A database that cannot be reached then does not stop the start: the reads open
their connections as they need them, as they do after an outage.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping, Sequence
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus
from psycopg.rows import namedtuple_row
from sqlalchemy import Select, Table
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Dialect, Engine

from wq.engine.db import DatabaseNotAnswering, TimedAsyncConnection, Timeouts
from wq.engine.driver_reads import bound
from wq.engine.models import Base

Connect = Callable[[], Coroutine[Any, Any, TimedAsyncConnection]]

log = logging.getLogger("wq.daemon")


class _RaisedAnyway(logging.Filter):
    """Drops psycopg's warning that a pipeline could not end while an error was on its
    way out of it (a lost connection fails both): that error is raised, answered 503
    and logged once per outage, so the warning would only repeat it per request."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("error ignored terminating")


logging.getLogger("psycopg").addFilter(_RaisedAnyway())


class ConnectionSlots:
    """At most `size` async connections in use at once; idle ones kept for the next read.

    A read that finds none idle connects at once rather than waiting for a pool to do
    it in the background (psycopg_pool's way): with the server down, the connection is
    refused at once and the read answered 503 at once, as the sync engine's are,
    instead of after the pool's timeout; and nothing retries, and logs, meanwhile.
    """

    def __init__(self, connect: Connect, size: int, wait_seconds: float | None) -> None:
        self._connect = connect
        self._slots = asyncio.Semaphore(size)
        self._wait_seconds = wait_seconds
        self._idle: list[TimedAsyncConnection] = []
        self.waiting = 0  # reads waiting for a slot

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[TimedAsyncConnection]:
        """A connection for one read; kept for the next if it is still sound."""
        self.waiting += 1
        try:
            async with asyncio.timeout(self._wait_seconds):
                await self._slots.acquire()
        except TimeoutError:
            raise psycopg.OperationalError(
                f"no connection free for a read within {self._wait_seconds:g}s"
            ) from None
        finally:
            self.waiting -= 1
        try:
            connection = self._idle.pop() if self._idle else await self._connect()
            try:
                yield connection
            finally:
                sound = not connection.closed and not connection.broken
                if sound and connection.info.transaction_status == TransactionStatus.IDLE:
                    self._idle.append(connection)
                else:  # failed, or left in the middle of a statement
                    await connection.close()
        finally:
            self._slots.release()

    async def open_ahead(
        self, count: int, ready: Callable[[TimedAsyncConnection], Awaitable[None]]
    ) -> None:
        """Open `count` connections at once, each given to `ready`, and keep them idle.

        One that fails is left for a read to open when it needs it; the first line of
        the first failure is logged (psycopg's messages name the server, never the
        password).
        """

        async def one() -> TimedAsyncConnection:
            connection = await self._connect()
            try:
                await ready(connection)
            except BaseException:
                await connection.close()
                raise
            return connection

        opened = await asyncio.gather(*(one() for _ in range(count)), return_exceptions=True)
        self._idle.extend(result for result in opened if isinstance(result, TimedAsyncConnection))
        for result in opened:
            if not isinstance(result, TimedAsyncConnection | Exception):
                raise result  # cancelled: the app is stopping (the caller closes the rest)
        failures = [result for result in opened if isinstance(result, Exception)]
        if failures:
            lines = str(failures[0]).strip().splitlines()
            log.warning(
                "%d of the API's %d database connections could not be opened at start "
                "(they will be when needed): %s",
                len(failures),
                count,
                lines[0] if lines else type(failures[0]).__name__,
            )

    async def discard_idle(self) -> None:
        """Close the idle connections (after a disconnect: they may be gone too)."""
        idle, self._idle = self._idle, []
        for connection in idle:
            await connection.close()


class LoopReads:
    """Selects awaited on the event loop, on connections of `ConnectionSlots`."""

    def __init__(self, connections: ConnectionSlots, dialect: Dialect) -> None:
        self.connections = connections
        self.dialect = dialect

    async def fetch_all(self, statement: Select[Any], params: Mapping[str, Any]) -> Sequence[Any]:
        """All rows of `statement` with `params` bound, as named tuples."""
        sql, bound = self.bound(statement, params)
        async with self.connection(sql, bound) as connection:
            cursor = connection.cursor(row_factory=namedtuple_row)
            await cursor.execute(sql, bound)
            rows: list[Any] = await cursor.fetchall()
            return rows

    async def fetch_each(
        self, *reads: tuple[Select[Any], Mapping[str, Any]]
    ) -> list[Sequence[Any]]:
        """The rows of each statement with its parameters, in one round trip (psycopg's
        pipeline mode): statements that do not depend on each other's answers."""
        queries = [self.bound(statement, params) for statement, params in reads]
        async with self.connection(*queries[0]) as connection:
            async with connection.pipeline():
                cursors = []
                for sql, bound in queries:
                    cursor = connection.cursor(row_factory=namedtuple_row)
                    await cursor.execute(sql, bound)
                    cursors.append(cursor)
            return [await cursor.fetchall() for cursor in cursors]

    def bound(
        self, statement: Select[Any], params: Mapping[str, Any]
    ) -> tuple[str, Mapping[str, Any]]:
        """`statement`'s SQL for the driver and its parameters: its own and `params`."""
        return bound(statement, self.dialect, params)

    @contextlib.asynccontextmanager
    async def connection(
        self, sql: str, params: Mapping[str, Any]
    ) -> AsyncIterator[TimedAsyncConnection]:
        """A connection of the slots; a driver error in the block is raised as
        SQLAlchemy's, naming `sql` and `params` (the statement the block is about)."""
        try:
            async with self.connections.connection() as connection:
                try:
                    yield connection
                except psycopg.OperationalError as err:
                    if connection.broken and not isinstance(err, DatabaseNotAnswering):
                        # As SQLAlchemy does on a disconnect: the others may be gone too.
                        await self.connections.discard_idle()
                    raise
        except psycopg.Error as err:
            raise sa_exc.DBAPIError.instance(sql, dict(params), err, psycopg.Error) from err


@contextlib.asynccontextmanager
async def loop_reads(
    engine: Engine, timeouts: Timeouts, *, size: int
) -> AsyncIterator[LoopReads | None]:
    """`LoopReads` on `engine`'s database, if PostgreSQL, for the app's lifespan
    (None on SQLite), with up to `size` connections, opened at once (module docstring)."""
    if engine.dialect.name != "postgresql":
        yield None
        return
    conninfo = engine.url.set(drivername="postgresql").render_as_string(hide_password=False)

    async def connect() -> TimedAsyncConnection:
        connection = await TimedAsyncConnection.connect(
            conninfo, autocommit=True, **timeouts.connect_args()
        )
        connection.answer_timeout = timeouts.answer_seconds
        return connection

    connections = ConnectionSlots(connect, size, timeouts.answer_seconds)
    looks = [_first_look(table, engine.dialect) for table in Base.metadata.sorted_tables]

    async def look_at_every_table(connection: TimedAsyncConnection) -> None:
        async with connection.pipeline():
            for sql in looks:
                await connection.execute(sql)

    try:
        await connections.open_ahead(size, look_at_every_table)
        yield LoopReads(connections, engine.dialect)
    finally:
        await connections.discard_idle()


def _first_look(table: Table, dialect: Dialect) -> str:
    """A statement that makes a backend read `table`'s and its indexes' catalog entries
    (planning it does) without reading a row."""
    return f"SELECT 1 FROM {dialect.identifier_preparer.format_table(table)} LIMIT 0"
