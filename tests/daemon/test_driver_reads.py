"""The API's hot reads through the driver (wq.engine.driver_reads) on PostgreSQL.

What they show is checked against the loaded items in test_item_pages.py, and a list
restricted to the caller's types (bound as one array) in auth/test_http.py, on both
databases. Here: a connection that broke under a read is answered 503, discarded,
and the next read works.
"""

from __future__ import annotations

import logging

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from tests.conftest import Store
from tests.daemon.test_item_pages import add_items
from wq.daemon.runtime import Runtime


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_after_the_server_dropped_every_connection_one_read_is_refused(
    store: Store, runtime: Runtime, client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    # As SQLAlchemy does on a disconnect: the connection that failed is discarded,
    # and so is every other pooled connection that dates from before the failure.
    ids = add_items(store, runtime)
    held = [runtime.engine.connect() for _ in range(3)]
    for connection in held:
        connection.close()  # three connections wait in the pool
    assert client.get(f"/api/work-items/{ids[0]}").status_code == 200
    with store.engine.connect() as admin:
        admin.execute(
            text(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        )

    caplog.set_level(logging.WARNING)
    answers = [client.get(f"/api/work-items/{ids[0]}") for _ in range(5)]

    assert [answer.status_code for answer in answers] == [503, 200, 200, 200, 200]
    assert answers[0].headers["Retry-After"] == "5"
    assert "unavailable" in answers[0].json()["error"]
    # No traceback of a pool that found a dead connection when it took it back.
    assert not [record for record in caplog.records if record.exc_info]
