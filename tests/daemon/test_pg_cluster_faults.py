"""A real PostgreSQL server restarted, stopped and hung under a running daemon.

The test makes its own cluster (tests/support/pg_cluster.py) on a free port, so it
can do to it what no test may do to the shared one: the engine and the API of one
daemon run against it while it restarts, stays down, and hangs with every connection
open (SIGSTOP). The API must answer 503 with `Retry-After` meanwhile, within the
configured timeouts for a hung server, and every item it accepted must finish once
the server is back. Without the server's binaries it skips on a laptop and fails
in CI (`CI` / `WQ_REQUIRE_POSTGRES`).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from tests.conftest import REQUIRE_PG, make_config
from tests.support.chain import STEPS, Behaviour, chain_registry
from tests.support.pg_cluster import PrivateCluster, missing_binaries
from tests.support.waiting import wait_for
from wq.daemon.app import create_app
from wq.daemon.runtime import Runtime, build_runtime
from wq.engine import schema
from wq.engine.db import ANSWER_MARGIN_SECONDS, make_engine
from wq.engine.models import WorkItem

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(120)]

CONNECT_SECONDS = 2.0
STATEMENT_SECONDS = 1.0
# The longest a request may wait on a hung server: a pooled connection's ping gives up
# after the answer timeout, a new connection after the connect timeout.
HUNG_BOUND = STATEMENT_SECONDS + ANSWER_MARGIN_SECONDS + CONNECT_SECONDS


@pytest.fixture(scope="module")
def cluster() -> Iterator[PrivateCluster]:
    """A private cluster for this module; never left running, also after a failure."""
    reason = missing_binaries()
    if reason is not None:
        if REQUIRE_PG:
            pytest.fail(reason)
        pytest.skip(reason)
    cluster = PrivateCluster()
    try:
        cluster.init()
        cluster.start()
        yield cluster
    finally:
        cluster.destroy()


@dataclass
class Daemon:
    """The engine and API of one daemon on the private cluster, and what it accepted."""

    runtime: Runtime
    client: TestClient
    behaviour: Behaviour
    accepted: list[uuid.UUID] = field(default_factory=list)

    def submit(self, n: int) -> None:
        """Submit n items, each retried after a 503 as its Retry-After says (bounded)."""
        for _ in range(n):
            deadline = time.monotonic() + 60
            while True:
                response = self.client.post("/api/work-items/chain", json={"project": "group/app"})
                if response.status_code == 201:
                    self.accepted.append(uuid.UUID(response.json()["item"]["id"]))
                    break
                assert response.status_code == 503, response.text
                assert int(response.headers["Retry-After"]) > 0
                assert time.monotonic() < deadline, "the API never came back"
                time.sleep(0.2)  # a test need not wait the whole Retry-After

    def states(self) -> dict[uuid.UUID, tuple[str, str]]:
        """Phase and admission of every accepted item (read directly, not through the API)."""
        with self.runtime.sessions() as session:
            rows = session.execute(
                select(WorkItem.id, WorkItem.phase, WorkItem.admission).where(
                    WorkItem.id.in_(self.accepted)
                )
            ).all()
        return {row.id: (row.phase, row.admission) for row in rows}

    def all_finished(self) -> bool:
        """True once every accepted item ran its last step and went idle (a chain's end)."""
        try:
            states = self.states()
        except Exception:  # the server may still be coming back
            return False
        last_ran = {item_id for item_id, action in self.behaviour.calls if action == STEPS[-1]}
        return (
            len(states) == len(self.accepted)
            and set(states.values()) == {("active", "idle")}
            and last_ran >= set(self.accepted)
        )


def expect_503(client: TestClient) -> None:
    """Every database route answers 503 with Retry-After; the process itself is alive."""
    for method, path, body in (
        ("GET", "/api/work-items", None),
        ("POST", "/api/work-items/chain", {"project": "group/app"}),
        ("GET", "/api/pools", None),
    ):
        response = client.request(method, path, json=body)
        assert response.status_code == 503, (method, path, response.text)
        assert int(response.headers["Retry-After"]) > 0
        assert "database" in response.json()["error"]
    assert client.get("/readyz").status_code == 503
    assert client.get("/healthz").status_code == 200


def wait_until_serving(client: TestClient, timeout: float = 30) -> None:
    wait_for(
        lambda: client.get("/api/work-items", params={"limit": 1}).status_code == 200,
        timeout=timeout,
        interval=0.2,
        message="the API to answer again",
    )


def migrated_database(cluster: PrivateCluster, prefix: str) -> str:
    """The URL of a new database on `cluster` with wq's schema."""
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(cluster.url(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = cluster.url(name)
    engine = make_engine(url, pool_size=1)
    schema.upgrade(engine)
    engine.dispose()
    return url


@pytest.fixture
def daemon(cluster: PrivateCluster) -> Iterator[Daemon]:
    url = migrated_database(cluster, "wq_faults")
    config = make_config(
        url,
        database={
            "connect_timeout_seconds": CONNECT_SECONDS,
            "statement_timeout_seconds": STATEMENT_SECONDS,
        },
    )
    # Each action takes a moment, so that the faults land while items are in flight.
    behaviour = Behaviour(sleep={"step2": 0.1})
    runtime = build_runtime(config, registry=chain_registry(behaviour))
    assert runtime.local_tier is not None
    runtime.start_processing()
    headers = {"Authorization": f"Bearer {runtime.local_tier.token}"}
    try:
        with TestClient(
            create_app(runtime), raise_server_exceptions=False, headers=headers
        ) as client:
            yield Daemon(runtime, client, behaviour)
    finally:
        assert runtime.manager is not None
        runtime.manager.stop(grace=2)
        runtime.engine.dispose()


def assert_each_ran_once_to_the_end(daemon: Daemon) -> None:
    try:
        wait_for(daemon.all_finished, timeout=60, interval=0.2, message="every item to finish")
    except AssertionError:
        raise AssertionError(f"not all finished: {daemon.states()}") from None
    for item_id in daemon.accepted:
        steps = [action for seen, action in daemon.behaviour.calls if seen == item_id]
        # Each step at least once and in order; a step cut off by the fault may rerun.
        assert [s for i, s in enumerate(steps) if s not in steps[:i]] == list(STEPS), steps


def test_a_restart_and_a_stop_are_503s_and_lose_nothing(
    cluster: PrivateCluster, daemon: Daemon
) -> None:
    daemon.submit(8)
    cluster.restart()  # mid-run: connections the engine and the API held are gone
    daemon.submit(4)
    wait_until_serving(daemon.client)

    cluster.stop()
    try:
        expect_503(daemon.client)
        time.sleep(1.5)  # the engine keeps failing meanwhile and must not give up
        expect_503(daemon.client)
    finally:
        cluster.start()
    wait_until_serving(daemon.client)
    daemon.submit(4)
    assert_each_ran_once_to_the_end(daemon)
    assert len(daemon.accepted) == 16


def test_a_hung_server_is_503_within_the_timeout_and_recovers(
    cluster: PrivateCluster, daemon: Daemon
) -> None:
    daemon.submit(6)
    wait_until_serving(daemon.client)  # the pool holds live connections to hang on
    cluster.freeze()
    try:
        for _ in range(2):
            started = time.monotonic()
            response = daemon.client.get("/api/work-items")
            waited = time.monotonic() - started
            assert response.status_code == 503, response.text
            assert int(response.headers["Retry-After"]) > 0
            # Bounded by the configured timeouts (with slack for a loaded machine),
            # not by how long the server stays hung.
            assert waited < HUNG_BOUND + 5, waited
        assert daemon.client.get("/healthz").status_code == 200
    finally:
        cluster.thaw()
    wait_until_serving(daemon.client)
    daemon.submit(2)
    assert_each_ran_once_to_the_end(daemon)


def test_after_a_restart_no_request_fails_on_a_connection_the_server_ended(
    cluster: PrivateCluster, daemon: Daemon
) -> None:
    # Every connection the API kept idle (the sync pool's and the event loop's) dates
    # from before the restart; the first request on each used to be a 503, and a
    # submission answered 503 is lost unless its caller sends it again.
    daemon.submit(2)
    item = daemon.accepted[0]
    requests: list[tuple[str, str, dict[str, str] | None]] = [
        ("GET", "/api/work-items", None),
        ("GET", f"/api/work-items/{item}", None),
        ("POST", "/api/work-items/chain", {"project": "group/app"}),
        ("GET", "/api/pools", None),
    ]
    for method, path, body in requests * 3:  # the idle connections all used once
        assert daemon.client.request(method, path, json=body).status_code < 300

    cluster.restart()

    for method, path, body in requests * 5:
        response = daemon.client.request(method, path, json=body)
        assert response.status_code in (200, 201), (method, path, response.text)
        if method == "POST":
            daemon.accepted.append(uuid.UUID(response.json()["item"]["id"]))
    assert_each_ran_once_to_the_end(daemon)


def test_probes_and_scrapes_answer_in_their_time_while_the_server_hangs(
    cluster: PrivateCluster,
) -> None:
    # The API's own timeouts as configured by default (10 s a statement, 5 s to connect):
    # `/readyz` waiting for them took 17 s, past the kubelet's 5 s (deploy/), and so did
    # each `/metrics` scrape, past Prometheus's 10 s.
    url = migrated_database(cluster, "wq_probe")
    config = make_config(url, metrics={"cache_seconds": 1})
    runtime = build_runtime(config, registry=chain_registry(Behaviour()))

    def timed(path: str) -> tuple[float, Any]:
        started = time.monotonic()
        response = client.get(path)
        return time.monotonic() - started, response

    try:
        with TestClient(create_app(runtime), raise_server_exceptions=False) as client:
            assert client.get("/readyz").status_code == 200
            assert "db_metrics_errors_total 0.0" in client.get("/metrics").text
            time.sleep(2.5)  # pooled connections are pinged before use from now on
            cluster.freeze()
            try:
                ready = timed("/readyz")
                scrapes = [timed("/metrics"), timed("/metrics")]
            finally:
                cluster.thaw()
            assert ready[1].status_code == 503, ready[1].text
            assert ready[1].json()["error"] == "database unreachable"
            assert ready[0] < 5, ready[0]
            # The last reading, after the connect timeout (5 s) at most; the next scrape
            # at once (the reading that failed counts from its end).
            assert [response.status_code for _, response in scrapes] == [200, 200]
            assert scrapes[0][0] < 8 and scrapes[1][0] < 1, scrapes
            assert "db_metrics_errors_total 1.0" in scrapes[1][1].text
            wait_for(lambda: client.get("/readyz").status_code == 200, message="ready again")
    finally:
        runtime.engine.dispose()
