"""Hot reads straight through psycopg on PostgreSQL: on the event loop
(wq.daemon.loop_reads: GET item, the list) and in a thread (wq.engine.driver_reads:
a submission's look at its branch).

What they show is checked against the loaded items in test_item_pages.py, and a list
restricted to the caller's types (bound as one array) in auth/test_http.py, on both
databases. Here: after the server dropped every connection, one read fails (503) and
the pooled connections are replaced, not one failure per connection; with the server
refusing connections, a read fails at once. A started app has its connections open
before its first request; one that cannot open them still starts.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
import uuid

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import exc as sa_exc
from sqlalchemy import text

from tests.conftest import Store
from tests.daemon.test_item_pages import add_items
from wq.daemon.loop_reads import loop_reads
from wq.daemon.reads import item_statement
from wq.daemon.runtime import Runtime
from wq.engine.db import Timeouts, make_engine
from wq.engine.driver_reads import fetch_all


def kill_connections(store: Store) -> None:
    """The server ends every session of the test's database but the one asking."""
    with store.engine.connect() as admin:
        admin.execute(
            text(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        )


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_after_the_server_dropped_every_connection_one_read_is_refused(
    store: Store, runtime: Runtime, client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    # As SQLAlchemy does on a disconnect: the connection that failed is discarded,
    # and so is every other pooled connection that dates from before the failure.
    ids = add_items(store, runtime)
    reads = client.app.state.loop_reads  # type: ignore[attr-defined]
    assert reads is not None  # GET item reads on the event loop

    async def fill_the_pool() -> None:
        slots = reads.connections
        async with slots.connection(), slots.connection(), slots.connection():
            pass  # three connections are kept idle

    assert client.portal is not None
    client.portal.call(fill_the_pool)
    assert client.get(f"/api/work-items/{ids[0]}").status_code == 200
    kill_connections(store)

    caplog.set_level(logging.WARNING)
    answers = [client.get(f"/api/work-items/{ids[0]}") for _ in range(5)]

    assert [answer.status_code for answer in answers] == [503, 200, 200, 200, 200]
    assert answers[0].headers["Retry-After"] == "5"
    assert "unavailable" in answers[0].json()["error"]
    # No traceback of a pool that found a dead connection when it took it back.
    assert not [record for record in caplog.records if record.exc_info]


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_a_read_in_a_thread_that_finds_its_connection_dropped_replaces_the_pool(
    store: Store,
) -> None:
    held = [store.engine.connect() for _ in range(3)]
    for connection in held:
        connection.close()
    kill_connections(store)
    absent = {"id": uuid.uuid4()}

    with store.sessions() as session, pytest.raises(sa_exc.OperationalError):
        fetch_all(session, item_statement(), absent)
    for _ in range(3):
        with store.sessions() as session:
            assert fetch_all(session, item_statement(), absent) == []


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_a_started_app_has_its_read_connections_open_before_its_first_request(
    store: Store, runtime: Runtime, client: TestClient
) -> None:
    # A burst of requests right after a daemon started waited for new connections and
    # for each new backend's first look at the tables; the lifespan opens them ahead.
    with store.engine.connect() as admin:
        ready = admin.execute(
            text(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND state = 'idle' AND query LIKE 'SELECT 1 FROM % LIMIT 0'"
            )
        ).scalar_one()
    assert ready == runtime.config.server.request_threads


def test_a_read_on_the_loop_fails_at_once_when_the_server_refuses_connections(
    unused_port: int, caplog: pytest.LogCaptureFixture
) -> None:
    # The sync engine's pool connects when it has no idle connection, so a stopped
    # server is a 503 at once; so are the loop's reads (not after a pool's timeout).
    engine = make_engine(f"postgresql://postgres@127.0.0.1:{unused_port}/wq")
    timeouts = Timeouts(connect_seconds=5, statement_seconds=5)

    async def read() -> float:
        async with loop_reads(engine, timeouts, size=2) as reads:
            assert reads is not None
            started = time.monotonic()
            with pytest.raises(sa_exc.OperationalError, match="refused"):
                await reads.fetch_all(item_statement(), {"id": uuid.uuid4()})
            return time.monotonic() - started

    caplog.set_level(logging.WARNING, logger="wq.daemon")
    try:
        assert asyncio.run(read()) < 1.0
    finally:
        engine.dispose()
    # The app started all the same, and said once why its connections are not open.
    [warning] = [record.getMessage() for record in caplog.records if record.name == "wq.daemon"]
    assert warning.startswith("2 of the API's 2 database connections could not be opened")
    assert "refused" in warning


@pytest.fixture
def unused_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
