"""Round trips the engine makes: statements by kind, BEGIN, COMMIT and pings, per item."""

from __future__ import annotations

import threading
import weakref
from collections import Counter
from typing import Any

import psycopg
from sqlalchemy import Engine, event

from wq.engine import audit


def _autocommit(conn: Any) -> bool:
    return bool(conn.get_execution_options().get("isolation_level") == "AUTOCOMMIT")


# Counted, but not a round trip: a BEGIN sent in one flight with its transaction's first
# statement (psycopg pipeline mode, `wq.engine.pipelined`).
PIPELINED = "(no round trip) BEGIN sent with the first statement"


def _in_transaction(conn: Any) -> bool | None:
    """Whether psycopg's connection is in a transaction (None: not psycopg)."""
    driver = getattr(conn.connection, "driver_connection", None)
    if not isinstance(driver, psycopg.Connection):
        return None
    return bool(driver.info.transaction_status != psycopg.pq.TransactionStatus.IDLE)


class StatementCounter:
    """Round trips the engine makes: statements by kind, plus BEGIN, COMMIT and pings."""

    def __init__(self, engine: Engine) -> None:
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        event.listen(engine, "before_cursor_execute", self._statement)
        event.listen(engine, "begin", self._begin)
        event.listen(engine, "commit", self._commit)
        event.listen(engine, "rollback", self._rollback)
        # The pool pings a connection only when it sat idle (wq.engine.db): count pings.
        ping = engine.dialect.do_ping

        def counted_ping(dbapi_connection: Any) -> bool:
            self._add("pool ping of an idle connection (SELECT 1)")
            return bool(ping(dbapi_connection))

        engine.dialect.do_ping = counted_ping  # type: ignore[method-assign]
        # The audit rows go in with COPY or an INSERT on the driver's connection, which
        # SQLAlchemy's events do not see: count them too, on this engine's connections
        # (PostgreSQL's: sqlite3 connections cannot be weakly referenced, and SQLite's
        # audit rows go through SQLAlchemy).
        if engine.dialect.name != "postgresql":
            return
        mine: weakref.WeakSet[Any] = weakref.WeakSet()
        event.listen(
            engine, "connect", lambda dbapi_connection, _record: mine.add(dbapi_connection)
        )

        def count_driver_statement(cursor: Any, key: str) -> None:
            driver = cursor.connection
            idle = driver.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
            if idle and not driver.autocommit:
                self._add("BEGIN")  # psycopg sends it ahead of the statement
            self._add(key)

        copy = psycopg.Cursor.copy
        executemany = psycopg.Cursor.executemany
        # Absent from a checkout measured from before it (its audit INSERT went through
        # SQLAlchemy, whose events count it); private in a few.
        driver_insert = getattr(audit, "INSERT_AUDIT", getattr(audit, "_INSERT_AUDIT", None))

        def counted_copy(cursor: Any, statement: Any, *args: Any, **kwargs: Any) -> Any:
            if cursor.connection in mine:
                count_driver_statement(cursor, "COPY audit_log")
            return copy(cursor, statement, *args, **kwargs)

        def counted_executemany(cursor: Any, statement: Any, *args: Any, **kwargs: Any) -> Any:
            # SQLAlchemy's own executemany calls are counted by its events.
            if cursor.connection in mine and statement == driver_insert:
                count_driver_statement(cursor, "INSERT INTO audit_log")
            return executemany(cursor, statement, *args, **kwargs)

        psycopg.Cursor.copy = counted_copy  # type: ignore[method-assign]
        psycopg.Cursor.executemany = counted_executemany  # type: ignore[method-assign]

    def _add(self, key: str) -> None:
        with self._lock:
            self.counts[key] += 1

    def _statement(self, conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        # psycopg sends BEGIN before the first statement of a transaction (not when
        # SQLAlchemy begins one, which sends nothing): counted here, as it goes out.
        driver = getattr(conn.connection, "driver_connection", None)
        if _in_transaction(conn) is False and not getattr(driver, "autocommit", True):
            context = args[1] if len(args) > 1 else None
            options = getattr(context, "execution_options", {}) or {}
            self._add(PIPELINED if options.get("wq_pipelined_begin") else "BEGIN")
        words = " ".join(statement.split())
        if words.startswith(("INSERT", "UPDATE", "DELETE")):
            key = " ".join(words.split()[:3])
        elif words.startswith(("SAVEPOINT", "RELEASE SAVEPOINT", "ROLLBACK TO")):
            key = words.rsplit(" ", 1)[0]
        elif words.startswith("WITH RECURSIVE"):
            key = "WITH RECURSIVE (projects_with_queued)"
        elif words.startswith("WITH released AS"):
            key = "WITH released (release, audit rows, NOTIFY)"
        elif "pg_notify" in words:
            key = "SELECT pg_notify"
        elif "pg_advisory_xact_lock" in words:
            key = "SELECT pg_advisory_xact_lock"
        elif "nextval" in words:
            key = "SELECT nextval"
        elif words.startswith("SELECT") and " FROM " in words:
            key = "SELECT ... FROM " + words.split(" FROM ", 1)[1].split()[0]
        else:
            key = words[:40]
        self._add(key)

    def _begin(self, conn: Any) -> None:
        # psycopg: counted with the statement that sends it; in autocommit none is sent.
        if _in_transaction(conn) is None and not _autocommit(conn):
            self._add("BEGIN")

    def _commit(self, conn: Any) -> None:
        # psycopg sends no COMMIT for a transaction that sent nothing, nor in autocommit.
        if _in_transaction(conn) is not False and not _autocommit(conn):
            self._add("COMMIT")

    def _rollback(self, conn: Any) -> None:
        if _in_transaction(conn) is not False:
            self._add("ROLLBACK")

    def snapshot(self) -> Counter[str]:
        """A copy of the counts so far."""
        with self._lock:
            return Counter(self.counts)


def per_item(counts: Counter[str], items: int) -> dict[str, float]:
    """Statement counts divided by the number of items, largest first, with a total."""
    result = {key: round(count / items, 2) for key, count in counts.most_common()}
    trips = sum(count for key, count in counts.items() if key != PIPELINED)
    result["TOTAL round trips"] = round(trips / items, 2)
    return result
