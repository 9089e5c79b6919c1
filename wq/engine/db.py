"""Database engines and sessions for PostgreSQL (psycopg 3) and SQLite.

SQLite runs in WAL mode with a busy timeout; write transactions start with
`BEGIN IMMEDIATE` so two writers queue on the lock instead of failing on upgrade.
Sessions bound through `read_only()` start a plain deferred transaction, which in WAL
mode never waits for a writer.

PostgreSQL connections have a connect timeout, a server-side statement timeout, and a
client-side bound on every wait for the server: a server whose processes are stopped
still accepts TCP and acknowledges packets, so only the client can notice that it no
longer answers. Such a connection is closed, and the pool replaces it.
"""

from __future__ import annotations

import math
import os
import select
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
from psycopg.abc import RV, PQGen
from sqlalchemy import Engine, create_engine, event, exc
from sqlalchemy.engine import URL, make_url
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import NullPool

from wq.engine import jsontext
from wq.engine.private import create_private_file, make_private_dirs

READ_ONLY_OPTION = "wq_read_only"
# How much longer than the statement timeout the client waits for an answer: the
# server's own timeout normally fires first and leaves the connection usable.
ANSWER_MARGIN_SECONDS = 2.0
_POLL_INTERVAL = 0.1
# Pooled PostgreSQL connections idle at least this long are pinged before use.
IDLE_PING_SECONDS = 2.0
RECYCLE_SECONDS = 1800
_IDLE_SINCE = "wq_idle_since"


@dataclass(frozen=True)
class Timeouts:
    """How long to wait for a PostgreSQL server (None: no bound)."""

    connect_seconds: float | None = 5.0
    statement_seconds: float | None = 10.0

    @property
    def answer_seconds(self) -> float | None:
        """The client-side bound on one wait for the server."""
        if self.statement_seconds is None:
            return None
        return self.statement_seconds + ANSWER_MARGIN_SECONDS

    def connect_args(self) -> dict[str, Any]:
        """libpq parameters: the connect timeout and the server's settings for wq's
        sessions (the statement timeout; no JIT)."""
        args: dict[str, Any] = {}
        if self.connect_seconds is not None:
            # libpq takes whole seconds (and treats 1 as 2).
            args["connect_timeout"] = max(2, math.ceil(self.connect_seconds))
        # JIT compiles a query whose estimated cost is high, as the gauges' and the
        # stats' are on a long history: tens of milliseconds per statement for queries
        # that run in a few (measured in benchmarks/scale.py). Short statements only.
        options = ["-c jit=off"]
        if self.statement_seconds is not None:
            options.append(f"-c statement_timeout={math.ceil(self.statement_seconds * 1000)}")
        args["options"] = " ".join(options)
        return args


DEFAULT_TIMEOUTS = Timeouts()
# A readiness probe's: it must answer before the orchestrator's probe gives up (5 s in
# deploy/), whatever the server does: at most the connect timeout (libpq's least, 2 s)
# or the answer's (1 s + the margin).
PROBE_TIMEOUTS = Timeouts(connect_seconds=2.0, statement_seconds=1.0)
# Migrations may run long statements: only the connection attempt is bounded.
MIGRATION_TIMEOUTS = Timeouts(statement_seconds=None)


class DatabaseNotAnswering(psycopg.OperationalError):
    """The server accepted the connection but did not answer in time; it was closed."""


class TimedConnection(psycopg.Connection[Any]):
    """A psycopg connection that gives up waiting for a server that does not answer.

    Waits that name their own timeout (LISTEN's `notifies`) keep it.
    """

    answer_timeout: float | None = None

    def wait(
        self, gen: PQGen[RV], interval: float = _POLL_INTERVAL, timeout: float | None = None
    ) -> RV:
        """Drive `gen`, bounded by `answer_timeout` unless the caller gave a timeout."""
        if timeout is not None or self.answer_timeout is None:
            return super().wait(gen, interval, timeout)
        try:
            return super().wait(gen, interval, self.answer_timeout)
        except psycopg.errors._WaitTimeout:
            # The statement's fate is unknown and the protocol is mid-exchange: the
            # connection cannot be reused.
            self.close()
            raise DatabaseNotAnswering(
                f"the database did not answer within {self.answer_timeout:g}s"
            ) from None


class TimedAsyncConnection(psycopg.AsyncConnection[Any]):
    """`TimedConnection` for asyncio: a server that does not answer in time gets its
    connection closed, not a cancel request (psycopg's reaction to an interrupted
    wait, which waits up to 10 s more for a hung server)."""

    answer_timeout: float | None = None

    async def wait(
        self, gen: PQGen[RV], interval: float = _POLL_INTERVAL, timeout: float | None = None
    ) -> RV:
        """Drive `gen`, bounded by `answer_timeout` unless the caller gave a timeout."""
        if timeout is not None or self.answer_timeout is None:
            return await super().wait(gen, interval, timeout)
        try:
            return await super().wait(gen, interval, self.answer_timeout)
        except psycopg.errors._WaitTimeout:
            await self.close()
            raise DatabaseNotAnswering(
                f"the database did not answer within {self.answer_timeout:g}s"
            ) from None


def has_input(fileno: int) -> bool:
    """True if a connection nobody is using has something to read (or was closed).

    An idle connection expects nothing from the server: input there is almost always
    the server ending it (a restart, an administrator's `pg_terminate_backend`, an idle
    timeout), whose message and end of stream arrive the moment it happens. Seeing it
    costs one system call and no round trip, so every reuse of a pooled connection can
    afford the look.
    """
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(fileno, select.POLLIN)
        return bool(poller.poll(0))
    readable, _, _ = select.select([fileno], [], [], 0)  # Windows: no poll()
    return bool(readable)


def connect_postgres(dsn: str, timeouts: Timeouts = DEFAULT_TIMEOUTS, **kwargs: Any) -> Any:
    """A psycopg connection with the connect, statement and answer timeouts."""
    params = {**timeouts.connect_args(), **kwargs}
    conn = TimedConnection.connect(dsn, **params)
    conn.answer_timeout = timeouts.answer_seconds
    return conn


# The URLs wq has a driver for: PostgreSQL through psycopg 3 (the plain spellings are
# mapped to it, see normalize_url) and SQLite. SQLAlchemy would take others and fail
# only once it imports a driver module that is not installed.
SUPPORTED_DRIVERS = ("postgresql", "postgres", "postgresql+psycopg", "sqlite", "sqlite+pysqlite")
SUPPORTED_URLS = "only postgresql:// and sqlite:// URLs are supported"


def url_problem(url: str) -> str | None:
    """Why `url` is no database URL wq can use, in words without its password; None if
    it is one."""
    try:
        parsed = make_url(url)
    except (exc.ArgumentError, ValueError):  # no scheme; a port that is not a number
        return f"cannot be parsed as a database URL ({SUPPORTED_URLS})"
    if parsed.drivername not in SUPPORTED_DRIVERS:
        return f"{parsed.drivername}:// is not supported ({SUPPORTED_URLS})"
    if parsed.drivername.startswith("sqlite"):
        path = parsed.database or ""
        if path in ("", ":memory:"):
            # Each connection would have a database of its own, lost with the process.
            return "a SQLite database must be a file, such as sqlite:////var/lib/wq/wq.db"
        if "\0" in path:
            return "the SQLite file's name holds a NUL character"
    return None


def normalize_url(url: str) -> str:
    """Map the plain `postgresql://` spellings to the psycopg 3 driver."""
    parsed = make_url(url)
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed.render_as_string(hide_password=False)


def shown_url(url: URL) -> str:
    """A database URL as logs and messages may show it: its password hidden, in the
    user part as in a query parameter (libpq takes `?password=` and `?sslpassword=`)."""
    secret = {key: "***" for key in url.query if "password" in key.lower()}
    shown = url.update_query_dict(secret).render_as_string(hide_password=True)
    return shown.replace("%2A%2A%2A", "***")


def is_sqlite(engine: Engine) -> bool:
    """True for the embedded SQLite store."""
    return engine.dialect.name == "sqlite"


class DatabaseMissing(sqlite3.OperationalError):
    """The SQLite file of an engine that may not create it is not there.

    A driver error, so that SQLAlchemy wraps it like any failure to connect (its
    `orig`): see `missing_database`.
    """

    def __init__(self, path: str) -> None:
        super().__init__(f"no database at {path}")
        self.path = path


class DatabaseUncreatable(OSError):
    """A SQLite file, or a directory on its way, that cannot be created.

    Still an `OSError` (errno, strerror and filename are the failed call's); its text
    is the one line the commands print: what could not be created, for which database,
    and why.
    """

    def __init__(self, database: str, err: OSError) -> None:
        super().__init__(err.errno, err.strerror or str(err), err.filename or database)
        self.database = database

    def __str__(self) -> str:
        if self.filename == self.database:
            return f"cannot create the database {self.database}: {self.strerror}"
        return f"cannot create {self.filename} (for the database {self.database}): {self.strerror}"


def missing_database(err: BaseException) -> DatabaseMissing | None:
    """The `DatabaseMissing` behind an error from an engine, if that is what it is."""
    cause = getattr(err, "orig", None) or err
    return cause if isinstance(cause, DatabaseMissing) else None


def _open_existing_only(engine: Engine) -> None:
    @event.listens_for(engine, "do_connect")
    def _connect(
        _dialect: Any, _record: Any, cargs: Any, cparams: dict[str, Any]
    ) -> sqlite3.Connection | None:
        path = cargs[0] if cargs else ""
        if cparams.get("uri") or not path or path == ":memory:":
            return None  # a URI of the URL's own says its mode itself
        if not os.path.exists(path):
            raise DatabaseMissing(path)
        # mode=rw never creates the file, should it be removed after the look above
        # (a new empty database would only hide the loss).
        connection: sqlite3.Connection = sqlite3.connect(
            f"file:{quote(path)}?mode=rw", uri=True, **cparams
        )
        return connection


def _configure_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: sqlite3.Connection, _record: Any) -> None:
        # Leave transaction control to the "begin" hook below.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        if connection.get_execution_options().get(READ_ONLY_OPTION):
            connection.exec_driver_sql("BEGIN")
        else:
            connection.exec_driver_sql("BEGIN IMMEDIATE")


def _create_sqlite_file(database: str) -> None:
    """Make a SQLite file and its directory that are not there yet, for their user
    alone: they hold every work item. SQLite gives the -wal and -shm files the
    database file's mode. What exists keeps its mode.

    Raises `DatabaseUncreatable` when the file or a directory cannot be made.
    """
    path = Path(database)
    try:
        make_private_dirs(path.parent)
        create_private_file(path)  # an empty file is an empty database to SQLite
    except OSError as err:
        raise DatabaseUncreatable(database, err) from None


def make_engine(
    url: str,
    *,
    pool_size: int = 20,
    timeouts: Timeouts = DEFAULT_TIMEOUTS,
    create: bool = True,
    pooled: bool = True,
) -> Engine:
    """Create an engine for a database URL.

    A SQLite file that is not there is created (0600, in a 0700 directory) only with
    `create` (`DatabaseUncreatable` when it cannot be); without it, connecting fails
    with `DatabaseMissing` and nothing is created. `timeouts` apply to PostgreSQL
    (SQLite waits for its lock with a busy timeout). Without `pooled`, each use of a
    PostgreSQL engine opens a connection of its own (no pooled one to ping first).
    """
    url = normalize_url(url)
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        on_disk = bool(parsed.database) and parsed.database != ":memory:"
        uri = str(parsed.query.get("uri", "")).lower() in ("true", "1")
        if create and on_disk and not uri:
            _create_sqlite_file(str(parsed.database))
        engine = create_engine(
            url,
            json_serializer=jsontext.dumps,
            hide_parameters=True,
            connect_args={"check_same_thread": False, "timeout": 30},
            pool_size=pool_size,
            max_overflow=pool_size,
        )
        if not create:
            _open_existing_only(engine)
        _configure_sqlite(engine)
        return engine
    if not pooled:
        engine = create_engine(
            url, json_serializer=jsontext.dumps, hide_parameters=True, poolclass=NullPool
        )
        _connect_with(engine, timeouts)
        return engine
    engine = create_engine(
        url,
        json_serializer=jsontext.dumps,
        # A database error's message (logged, and kept as an item's error) would quote
        # the statement's values: a task's payload or output, a token's claims.
        hide_parameters=True,
        pool_size=pool_size,
        max_overflow=pool_size,
        # No ping per checkout (a round trip on every transaction): connections idle
        # for a while are pinged (below), and old ones recycled.
        pool_recycle=RECYCLE_SECONDS,
        # A request waiting for a pooled connection gives up like one waiting for
        # the server (the default is 30 s).
        pool_timeout=timeouts.answer_seconds or 30.0,
    )

    _connect_with(engine, timeouts)
    _ping_when_idle(engine)
    return engine


def _connect_with(engine: Engine, timeouts: Timeouts) -> None:
    """PostgreSQL connections of `engine` are `connect_postgres`'s, bounded by `timeouts`."""

    @event.listens_for(engine, "do_connect")
    def _connect(_dialect: Any, _record: Any, cargs: Any, cparams: dict[str, Any]) -> Any:
        dsn = cargs[0] if cargs else ""
        return connect_postgres(dsn, timeouts, **cparams)


def _ping_when_idle(engine: Engine) -> None:
    """Ping a pooled connection at checkout when it sat idle for a while, or when the
    server sent it something while it was idle (`has_input`).

    A connection used milliseconds ago is as good as a ping would show, unless the
    server ended it since (a restart ends every connection at once, however recently
    used: without the look, the first request on each failed). One idle longer may
    have been dropped silently by a proxy. A failed ping makes the pool discard it and
    check out another (`DisconnectionError`).
    """

    @event.listens_for(engine, "checkin")
    def _checked_in(_dbapi: Any, record: Any) -> None:
        record.info[_IDLE_SINCE] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _checked_out(dbapi: Any, record: Any, _proxy: Any) -> None:
        since = record.info.get(_IDLE_SINCE)
        if since is None:
            return  # just connected
        if dbapi.closed:
            raise exc.DisconnectionError("pooled connection was closed")
        if time.monotonic() - since < IDLE_PING_SECONDS and not has_input(dbapi.fileno()):
            return
        try:
            engine.dialect.do_ping(dbapi)
        except Exception as err:
            raise exc.DisconnectionError(f"pooled connection failed its ping: {err}") from err


def make_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    """Sessions that keep loaded objects usable after commit."""
    return sessionmaker(bind=engine, expire_on_commit=False)


def read_only(engine: Engine) -> Engine:
    """The same engine, marked so that SQLite opens deferred (reader) transactions."""
    return engine.execution_options(**{READ_ONLY_OPTION: True})


def autocommit_reads(engine: Engine) -> Engine:
    """For reads that need no snapshot across statements: autocommit on PostgreSQL.

    Each statement of a READ COMMITTED transaction takes a snapshot of its own anyway,
    so a reader gains nothing from the transaction but two round trips (BEGIN, and the
    ROLLBACK when the connection goes back to the pool). `SET LOCAL` has no effect
    there. SQLite keeps `read_only`'s deferred transaction (one WAL snapshot).
    """
    reads = read_only(engine)
    if is_sqlite(engine):
        return reads
    return reads.execution_options(isolation_level="AUTOCOMMIT")
