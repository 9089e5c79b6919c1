"""Hot reads straight through psycopg on PostgreSQL: on the event loop
(wq.daemon.loop_reads: GET item, the list) and in a thread (wq.engine.driver_reads:
a submission's look at its branch).

What they show is checked against the loaded items in test_item_pages.py, and a list
restricted to the caller's types (bound as one array) in auth/test_http.py, on both
databases. Here: after the server dropped every connection, no read fails (the pooled
connections it ended are replaced, not used); with the server refusing connections, a
read fails at once. A connection lost without a word (a proxy that forgot it) is
found dead only by the read that uses it: that read runs again on a new connection.
A started app has its connections open before its first request; one that cannot
open them still starts.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
import uuid

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import bindparam, select, text
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import make_url

from tests.conftest import Store
from tests.daemon.test_item_pages import add_items
from tests.engine.helpers import submit
from tests.support.chain import Behaviour, chain_registry
from tests.support.tcp_relay import TcpRelay
from wq.daemon.loop_reads import loop_reads
from wq.daemon.loop_submit import unchanged_on_loop
from wq.daemon.reads import item_statement
from wq.daemon.runtime import Runtime
from wq.engine.db import Timeouts, make_engine
from wq.engine.driver_reads import fetch_all
from wq.engine.models import WorkItem
from wq.engine.registry import UnchangedCheck


def kill_connections(store: Store) -> None:
    """The server ends every session of the test's database but the one asking, and
    each has said so (as a restart does) before this returns: without the wait, a
    backend still ending was taken from the pool before its goodbye arrived."""
    with store.engine.connect() as admin:
        admin.execute(
            text(
                "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        )


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_after_the_server_dropped_every_connection_no_read_fails(
    store: Store, runtime: Runtime, client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    # The server ended them (as a restart does): the first read on each used to be a 503.
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
    answers += [client.get("/api/work-items", params={"limit": 2}) for _ in range(3)]

    assert [answer.status_code for answer in answers] == [200] * 8, answers[0].text
    # No traceback of a pool that found a dead connection when it took it back.
    assert not [record for record in caplog.records if record.exc_info]


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_a_read_in_a_thread_never_gets_a_pooled_connection_the_server_dropped(
    store: Store,
) -> None:
    # Used a moment ago, so not pinged for being idle: the pool must see that the
    # server ended them (a restart, a terminated backend) rather than fail a request.
    held = [store.engine.connect() for _ in range(3)]
    for connection in held:
        connection.close()
    kill_connections(store)
    absent = {"id": uuid.uuid4()}

    for _ in range(4):
        with store.sessions() as session:
            assert fetch_all(session, item_statement(), absent) == []


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_a_read_whose_idle_connection_was_lost_silently_runs_again_on_a_new_one(
    store: Store,
) -> None:
    item = submit(store.sessions, chain_registry(Behaviour()), store.config).item
    assert item is not None
    url = make_url(store.url)
    relay = TcpRelay((url.host or "127.0.0.1", url.port or 5432))
    engine = make_engine(url.set(port=relay.port).render_as_string(hide_password=False))
    items = WorkItem.__table__
    # An unchanged submission's check: the item's row, locked, in a transaction.
    check = UnchangedCheck(
        statement=select(items.c.id).where(items.c.id == bindparam("id")).with_for_update(),
        params=lambda payload: {"id": payload},
        holds=lambda row, _payload: row is not None,
    )

    async def reads_after_each_loss() -> None:
        async with loop_reads(engine, Timeouts(), size=2) as reads:
            assert reads is not None
            relay.sever()  # both opened ahead, idle, and now dead without a sign
            assert await reads.fetch_all(item_statement(), {"id": uuid.uuid4()}) == []
            relay.sever()
            [rows] = await reads.fetch_each((item_statement(), {"id": item.id}))
            assert [row.id for row in rows] == [item.id]
            relay.sever()
            unchanged = await unchanged_on_loop(reads, check, item.id, None)
            assert unchanged is not None and unchanged.row.id == item.id

    try:
        asyncio.run(reads_after_each_loss())
    finally:
        engine.dispose()
        relay.close()


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
