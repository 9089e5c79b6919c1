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

A server restart must fail no request on a connection it had already ended: an idle
connection the server has spoken to is closed instead of reused (`has_input`), and a
read whose connection, taken idle, turns out dead before the server answered on it is
run once more on a new connection (`LoopReads.run`).

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
from typing import Any, TypeVar

import psycopg
from psycopg.pq import TransactionStatus
from psycopg.rows import namedtuple_row
from sqlalchemy import Select, Table
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Dialect, Engine

from wq.daemon.outage import used_database
from wq.engine.db import DatabaseNotAnswering, TimedAsyncConnection, Timeouts, has_input
from wq.engine.driver_reads import Statement, bound
from wq.engine.models import Base


class LoopConnection(TimedAsyncConnection):
    """A connection of `ConnectionSlots`, with what a read needs to know to retry."""

    # Taken idle, used by an earlier read (a new one cannot be stale).
    reused: bool = False
    # The server has answered the current read on it (set by the read): past that
    # point a failure is the read's own, not a stale connection's.
    answered: bool = False


Connect = Callable[[], Coroutine[Any, Any, LoopConnection]]
T = TypeVar("T")


class _FoundStale(Exception):
    """A connection taken idle was dead before the server answered anything on it."""


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
        self._idle: list[LoopConnection] = []
        self.waiting = 0  # reads waiting for a slot

    @contextlib.asynccontextmanager
    async def connection(self, *, fresh: bool = False) -> AsyncIterator[LoopConnection]:
        """A connection for one read (a new one if `fresh`); kept for the next if it is
        still sound."""
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
            connection = None if fresh else await self._take_idle()
            if connection is None:
                connection = await self._connect()
            connection.answered = False
            used_database()
            try:
                yield connection
            finally:
                sound = not connection.closed and not connection.broken
                if sound and connection.info.transaction_status == TransactionStatus.IDLE:
                    connection.reused = True  # from now on
                    self._idle.append(connection)
                else:  # failed, or left in the middle of a statement
                    await connection.close()
        finally:
            self._slots.release()

    async def _take_idle(self) -> LoopConnection | None:
        """The last connection put back that the server has not ended, if any.

        One that has input while idle is closed, not used: the server has ended it
        (or said something no read expects), and a request on it would fail.
        """
        while self._idle:
            connection = self._idle.pop()
            if not connection.closed and not has_input(connection.fileno()):
                return connection
            await connection.close()
        return None

    async def open_ahead(
        self, count: int, ready: Callable[[LoopConnection], Awaitable[None]]
    ) -> None:
        """Open `count` connections at once, each given to `ready`, and keep them idle.

        One that fails is left for a read to open when it needs it; the first line of
        the first failure is logged (psycopg's messages name the server, never the
        password).
        """

        async def one() -> LoopConnection:
            connection = await self._connect()
            try:
                await ready(connection)
            except BaseException:
                await connection.close()
                raise
            return connection

        opened = await asyncio.gather(*(one() for _ in range(count)), return_exceptions=True)
        for result in opened:
            if isinstance(result, LoopConnection):
                result.reused = True  # as good as used: it has made its first round trip
                self._idle.append(result)
        for result in opened:
            if not isinstance(result, LoopConnection | Exception):
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

        async def read(connection: LoopConnection) -> Sequence[Any]:
            cursor = connection.cursor(row_factory=namedtuple_row)
            await cursor.execute(sql, bound)
            rows: list[Any] = await cursor.fetchall()
            return rows

        return await self.run(sql, bound, read)

    async def fetch_each(
        self, *reads: tuple[Select[Any], Mapping[str, Any]]
    ) -> list[Sequence[Any]]:
        """The rows of each statement with its parameters, in one round trip (psycopg's
        pipeline mode): statements that do not depend on each other's answers."""
        queries = [self.bound(statement, params) for statement, params in reads]

        async def read(connection: LoopConnection) -> list[Sequence[Any]]:
            async with connection.pipeline():
                cursors = []
                for sql, bound in queries:
                    cursor = connection.cursor(row_factory=namedtuple_row)
                    await cursor.execute(sql, bound)
                    cursors.append(cursor)
            return [await cursor.fetchall() for cursor in cursors]

        return await self.run(*queries[0], read)

    def bound(
        self, statement: Statement, params: Mapping[str, Any]
    ) -> tuple[str, Mapping[str, Any]]:
        """`statement`'s SQL for the driver and its parameters: its own and `params`."""
        return bound(statement, self.dialect, params)

    async def run(
        self,
        sql: str,
        params: Mapping[str, Any],
        work: Callable[[LoopConnection], Awaitable[T]],
    ) -> T:
        """`work` on a connection of the slots; a driver error in it is raised as
        SQLAlchemy's, naming `sql` and `params` (the statement it is about).

        If the connection, taken idle, was dead before the server answered on it (a
        server restart since its last read: ended connections do not always show it
        while idle), `work` runs once more on a new connection. `work` must be safe to
        run again until it sets `connection.answered` (a read; a transaction until its
        first answer): nothing it sent before then took effect.
        """
        try:
            return await self._attempt(sql, params, work, fresh=False)
        except _FoundStale:
            return await self._attempt(sql, params, work, fresh=True)

    async def _attempt(
        self,
        sql: str,
        params: Mapping[str, Any],
        work: Callable[[LoopConnection], Awaitable[T]],
        *,
        fresh: bool,
    ) -> T:
        try:
            async with self.connections.connection(fresh=fresh) as connection:
                try:
                    return await work(connection)
                except psycopg.OperationalError as err:
                    if connection.broken and not isinstance(err, DatabaseNotAnswering):
                        # As SQLAlchemy does on a disconnect: the others may be gone too.
                        await self.connections.discard_idle()
                        if connection.reused and not connection.answered:
                            raise _FoundStale() from err
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

    async def connect() -> LoopConnection:
        connection = await LoopConnection.connect(
            conninfo, autocommit=True, **timeouts.connect_args()
        )
        connection.answer_timeout = timeouts.answer_seconds
        return connection

    connections = ConnectionSlots(connect, size, timeouts.answer_seconds)
    looks = [_first_look(table, engine.dialect) for table in Base.metadata.sorted_tables]

    async def look_at_every_table(connection: LoopConnection) -> None:
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
