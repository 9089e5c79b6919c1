"""`GET /api/replicas` and the replica gauges: heartbeats write rows, a replica whose
heartbeat stopped shows as lost with the leases being rescued, a clean stop removes
its row, and rows lost long ago go."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from fastapi.testclient import TestClient
from sqlalchemy import select, update

from tests.conftest import Store, make_config
from tests.engine.helpers import submit
from tests.support.chain import Behaviour, chain_registry
from wq.daemon.runtime import Runtime
from wq.engine.metrics import Metrics
from wq.engine.metrics_db import DatabaseCollector
from wq.engine.models import ADMITTED, Replica, WorkItem, utcnow
from wq.engine.replicas import LOST_KEPT, ReplicaHeartbeat, ReplicaReport

REPORT = ReplicaReport(workers_busy=1, workers_total=4, consumes_events=True, last_event_at=None)


def beating(store: Store, replica_id: str, at: datetime | None = None) -> ReplicaHeartbeat:
    clock = (lambda: at) if at is not None else utcnow
    heartbeat = ReplicaHeartbeat(
        store.sessions, replica_id, lambda: REPORT, interval=5, clock=clock
    )
    heartbeat.beat()
    return heartbeat


def leased_to(store: Store, owners: list[str]) -> None:
    """One submitted item leased to each of these owners (`<replica>/worker-N`),
    admitted as every leased item is."""
    config = make_config(store.url)
    registry = chain_registry(Behaviour())
    for owner in owners:
        item = submit(store.sessions, registry, config, "team/app").item
        assert item is not None
        with store.sessions.begin() as session:
            session.execute(
                update(WorkItem)
                .where(WorkItem.id == item.id)
                .values(
                    admission=ADMITTED,
                    admitted_at=utcnow(),
                    lease_owner=owner,
                    leased_until=utcnow() + timedelta(seconds=30),
                )
            )


def test_replicas_alive_and_lost_with_the_leases_being_rescued(
    store: Store, runtime: Runtime, client: TestClient
) -> None:
    living = beating(store, "host-a:11")
    lost = beating(store, "host-b:22", at=utcnow() - timedelta(seconds=20))  # 4 beats ago
    # Two items still leased by the lost replica's workers, one by the living one.
    leased_to(store, ["host-b:22/worker-1", "host-b:22/worker-2", "host-a:11/worker-1"])
    living.beat()  # it counts its leases at each beat
    answer = client.get("/api/replicas")
    assert answer.status_code == 200, answer.text
    shown = {replica["id"]: replica for replica in answer.json()}
    assert [replica["id"] for replica in answer.json()] == ["host-a:11", "host-b:22"]
    alive, gone = shown["host-a:11"], shown["host-b:22"]
    assert (alive["state"], alive["host"], alive["pid"]) == ("alive", "host-a", 11)
    assert (alive["workers_busy"], alive["workers_total"], alive["leases_held"]) == (1, 4, 1)
    assert alive["being_rescued"] == 0 and alive["consumes_events"] is True
    assert alive["db_round_trip_ms"] is not None and alive["heartbeat_age_seconds"] < 5
    assert gone["state"] == "lost" and gone["being_rescued"] == 2
    assert gone["heartbeat_age_seconds"] >= 19
    # The gauges count them too.
    metrics = Metrics(process=False)
    metrics.registry.register(
        DatabaseCollector(store.sessions, store.config, lambda: [], prefix=metrics.service_prefix)
    )
    text = metrics.exposition().decode()
    assert "hummingbird_workqueue_replicas_alive 1.0" in text
    assert "hummingbird_workqueue_replicas_lost 1.0" in text
    # A clean stop removes the row; without a row there is nothing to show.
    lost.stop()
    assert [replica["id"] for replica in client.get("/api/replicas").json()] == ["host-a:11"]


def test_a_replica_counts_only_its_own_leases_whatever_its_host_name(store: Store) -> None:
    # `_` and `%` in a host name are not wildcards: "web_1:7" is not "webx1:7".
    leased_to(store, ["webx1:7/worker-1", "web%1:7/worker-2", "web_1:7/worker-3"])
    beating(store, "web_1:7")
    with store.sessions() as session:
        held = session.scalar(select(Replica.leases_held).where(Replica.id == "web_1:7"))
    assert held == 1


def test_a_heartbeat_updates_its_row_and_drops_replicas_lost_long_ago(store: Store) -> None:
    long_gone = beating(store, "host-old:1", at=utcnow() - LOST_KEPT - timedelta(minutes=1))
    assert long_gone.replica_id == "host-old:1"
    living = beating(store, f"host-c:{uuid.uuid4().int % 1000}")
    first = _heartbeat_of(store, living.replica_id)
    living.beat()
    with store.sessions() as session:
        ids = set(session.scalars(select(Replica.id)))
    assert ids == {living.replica_id}
    assert _heartbeat_of(store, living.replica_id) >= first


def test_reading_replicas_needs_the_read_permission(anon: TestClient) -> None:
    assert anon.get("/api/replicas").status_code == 401


def _heartbeat_of(store: Store, replica_id: str) -> datetime:
    with store.sessions() as session:
        row = session.get(Replica, replica_id)
        assert row is not None
        return row.heartbeat_at
