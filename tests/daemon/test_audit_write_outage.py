"""A request's audit writes (issue 17): off the event loop, and a timeout is a 503.

On PostgreSQL the audit rows of a request go in by COPY on the raw psycopg cursor.
A database that does not answer in time there (here: the audit table is locked by a
migration, and the statement timeout fires) must be answered like any other
outage, 503 with Retry-After, not 500 with a traceback. PostgreSQL only: SQLite
writes audit rows with an INSERT and has no statement timeout.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import psycopg
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event
from sqlalchemy.engine import make_url

from tests.conftest import empty_postgres, make_config
from tests.support.chain import Behaviour, chain_registry
from wq.daemon.app import create_app
from wq.daemon.runtime import Runtime, build_runtime
from wq.engine.db import make_engine


@pytest.fixture
def pg_runtime(pg_database: str) -> Iterator[Runtime]:
    engine = make_engine(pg_database, pool_size=1)
    empty_postgres(engine)
    engine.dispose()
    config = make_config(pg_database, database={"statement_timeout_seconds": 0.5})
    runtime = build_runtime(config, registry=chain_registry(Behaviour()))
    yield runtime
    runtime.engine.dispose()


def test_a_submission_whose_audit_write_times_out_is_answered_503(pg_runtime: Runtime) -> None:
    assert pg_runtime.local_tier is not None
    headers = {"Authorization": f"Bearer {pg_runtime.local_tier.token}"}
    dsn = make_url(pg_runtime.config.database_url).set(drivername="postgresql")
    with psycopg.connect(dsn.render_as_string(hide_password=False)) as migration:
        # A migration altering audit_log holds its lock; the submission's COPY waits
        # for it until the statement timeout cancels it.
        migration.execute("LOCK TABLE audit_log IN ACCESS EXCLUSIVE MODE")
        with TestClient(
            create_app(pg_runtime), raise_server_exceptions=False, headers=headers
        ) as client:
            response = client.post("/api/work-items/chain", json={"project": "group/app"})
        migration.rollback()
    assert response.status_code == 503, response.text
    assert int(response.headers["Retry-After"]) > 0


def test_a_submission_takes_its_database_connection_off_the_event_loop(
    runtime: Runtime, client: TestClient
) -> None:
    """Checking out a connection and beginning a transaction is I/O that can wait.

    On SQLite the transaction begins with BEGIN IMMEDIATE, which waits (up to the
    30 s busy timeout) while a batch or a worker holds the write lock; on PostgreSQL a
    checkout may connect or ping. On the event loop that wait stalls every request,
    /healthz included. Since 05f0586 the permission check runs on the event loop and
    audits the allow there: `on_commit.defer` calls `session.connection()`.
    """
    on_loop: list[str] = []

    def where(*_: object) -> None:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
        on_loop.append(threading.current_thread().name)

    event.listen(runtime.engine, "begin", where)
    event.listen(runtime.engine.pool, "checkout", where)
    try:
        response = client.post("/api/work-items/chain", json={"project": "group/app"})
    finally:
        event.remove(runtime.engine, "begin", where)
        event.remove(runtime.engine.pool, "checkout", where)
    assert response.status_code == 201, response.text
    assert on_loop == []
