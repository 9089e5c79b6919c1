"""A database that cannot be reached: 503 with Retry-After, one log line per outage.

The runtime points at a PostgreSQL port where nothing listens, so every connection
attempt really fails (no mocks); the daemon itself stays up: `/healthz` answers 200.
"""

from __future__ import annotations

import logging
import socket
import time
import uuid
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from tests.conftest import Store, make_config, throwaway_pg_database
from tests.support.chain import Behaviour, chain_registry
from tests.types.mr.events_support import mr_event
from tests.types.mr.helpers import mr_registry
from wq.daemon.app import create_app
from wq.daemon.runtime import Runtime, build_runtime
from wq.engine import schema
from wq.engine.db import make_engine

# Port 1 on loopback: nothing listens, the connection is refused at once.
UNREACHABLE_URL = "postgresql://postgres@127.0.0.1:1/wq"

ITEM = str(uuid.uuid4())
DATABASE_ROUTES = [
    ("GET", "/api/work-items", None),
    ("GET", f"/api/work-items/{ITEM}", None),
    ("POST", f"/api/work-items/{ITEM}/retry", None),
    ("POST", "/api/work-items/chain", {"project": "group/app"}),
    ("GET", "/api/pools", None),
    ("GET", "/api/pools/group/app", None),
    ("GET", "/api/queue?project=group/app", None),
]


@pytest.fixture
def down() -> Iterator[tuple[Runtime, TestClient]]:
    runtime = build_runtime(make_config(UNREACHABLE_URL), registry=chain_registry(Behaviour()))
    assert runtime.local_tier is not None
    headers = {"Authorization": f"Bearer {runtime.local_tier.token}"}
    with TestClient(create_app(runtime), raise_server_exceptions=False, headers=headers) as client:
        yield runtime, client
    runtime.engine.dispose()


def test_every_database_route_answers_503_with_retry_after(
    down: tuple[Runtime, TestClient], caplog: pytest.LogCaptureFixture
) -> None:
    _, client = down
    caplog.set_level(logging.INFO)
    for _ in range(3):
        for method, path, body in DATABASE_ROUTES:
            response = client.request(method, path, json=body)
            assert response.status_code == 503, (method, path, response.text)
            assert int(response.headers["Retry-After"]) > 0
            assert "database" in response.json()["error"]
    # One line for the whole outage, and no traceback for any request.
    outage_lines = [r for r in caplog.records if "database unavailable" in r.getMessage()]
    assert len(outage_lines) == 1, [r.getMessage() for r in outage_lines]
    assert [r.getMessage() for r in caplog.records if r.exc_info] == []
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


def test_probes_split_liveness_from_readiness(down: tuple[Runtime, TestClient]) -> None:
    _, client = down
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 503
    assert ready.json()["error"] == "database unreachable"
    assert int(ready.headers["Retry-After"]) > 0


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A TCP port that accepts connections and never answers (a hung PostgreSQL)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        yield listener.getsockname()[1]


def test_a_database_that_never_answers_gives_503_within_the_timeout(
    silent_server: int,
) -> None:
    config = make_config(
        f"postgresql://postgres@127.0.0.1:{silent_server}/wq",
        database={"connect_timeout_seconds": 2, "statement_timeout_seconds": 2},
    )
    runtime = build_runtime(config, registry=chain_registry(Behaviour()))
    assert runtime.local_tier is not None
    headers = {"Authorization": f"Bearer {runtime.local_tier.token}"}
    try:
        with TestClient(
            create_app(runtime), raise_server_exceptions=False, headers=headers
        ) as client:
            started = time.monotonic()
            response = client.get("/api/work-items")
            elapsed = time.monotonic() - started
            assert response.status_code == 503, response.text
            # The bound the issue asks for: a few seconds, not forever (generous: the
            # test machine is shared).
            assert elapsed < 15, elapsed
            assert client.get("/readyz").status_code == 503
    finally:
        runtime.engine.dispose()


def test_a_gitlab_event_during_an_outage_is_503_so_gitlab_sends_it_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # On PostgreSQL the webhook stores events on the event loop (wq.daemon.loop_events),
    # not through a session: a database that cannot be reached must still be a 503.
    monkeypatch.setenv("WQ_TEST_WEBHOOK_SECRET", "s3cret")
    config = make_config(UNREACHABLE_URL, events={"webhook_secret_env": "WQ_TEST_WEBHOOK_SECRET"})
    runtime = build_runtime(config, registry=mr_registry(monkeypatch))
    event = mr_event("approved")
    with TestClient(create_app(runtime), raise_server_exceptions=False) as client:
        for _ in range(2):
            response = client.post(
                "/api/webhooks/gitlab", json=event, headers={"X-Gitlab-Token": "s3cret"}
            )
            assert response.status_code == 503, response.text
            assert "database" in response.json()["error"]
    runtime.engine.dispose()


def test_an_answer_that_needed_no_database_does_not_end_the_outage(
    down: tuple[Runtime, TestClient], caplog: pytest.LogCaptureFixture
) -> None:
    """`wq whoami` with the local token needs no database: its 200 was logged as the
    database answering again, and the next request began a second outage."""
    _, client = down
    caplog.set_level(logging.INFO)
    assert client.get("/api/pools").status_code == 503
    assert client.get("/api/whoami").status_code == 200  # the local token: no database
    assert client.get("/api/pools").status_code == 503
    said = [r.getMessage() for r in caplog.records if "database" in r.getMessage()]
    assert [line for line in said if "answering again" in line] == [], said
    assert len([line for line in said if "database unavailable" in line]) == 1, said


def test_an_answer_that_used_the_database_ends_the_outage(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    runtime = build_runtime(make_config(store.url), registry=chain_registry(Behaviour()))
    assert runtime.local_tier is not None
    headers = {"Authorization": f"Bearer {runtime.local_tier.token}"}
    caplog.set_level(logging.INFO)
    try:
        app = create_app(runtime)
        with TestClient(app, raise_server_exceptions=False, headers=headers) as client:
            unknown = f"/api/work-items/{ITEM}"  # a 404, read from the database
            for path in ("/api/whoami", "/api/pools", "/api/work-items", unknown, "/readyz"):
                app.state.outage.failed(ConnectionRefusedError("as if it had been down"))
                assert client.get(path).status_code == (404 if path == unknown else 200)
                ended = [r for r in caplog.records if "answering again" in r.getMessage()]
                assert len(ended) == (0 if path == "/api/whoami" else 1), (path, ended)
                app.state.outage.ended()  # the next path starts from a fresh outage
                caplog.clear()
    finally:
        runtime.engine.dispose()


def test_a_database_without_its_schema_is_a_503_that_says_to_migrate(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The database dropped and made again under a running daemon: every request was a
    500 with a traceback in the log. It is an outage until `wq db migrate` runs."""
    with throwaway_pg_database("wq_schema_gone") as url:
        engine = make_engine(url, pool_size=1)
        schema.upgrade(engine)
        runtime = build_runtime(make_config(url), registry=chain_registry(Behaviour()))
        assert runtime.local_tier is not None
        headers = {"Authorization": f"Bearer {runtime.local_tier.token}"}
        try:
            with TestClient(create_app(runtime), headers=headers) as client:
                assert client.get("/api/work-items").status_code == 200
                with engine.begin() as conn:
                    conn.execute(text("DROP SCHEMA public CASCADE"))
                    conn.execute(text("CREATE SCHEMA public"))
                answers = [client.get("/api/work-items") for _ in range(3)]
                submitted = client.post("/api/work-items/chain", json={"project": "group/a"})
        finally:
            runtime.engine.dispose()
            engine.dispose()
    for answer in (*answers, submitted):
        assert answer.status_code == 503, answer.text
        assert "wq db migrate" in answer.json()["error"] and answer.headers["Retry-After"]
    assert "Traceback" not in caplog.text and "unhandled error" not in caplog.text
