"""GitLab events stored on the event loop (`wq.daemon.loop_events`, PostgreSQL only).

The webhook stores events through `ingest_on_loop` when a daemon runs on PostgreSQL;
these tests hold it to the session path's behaviour: the same items found, the same
rows stored, the same counts, and both this process's scheduler and the other
replicas told.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from sqlalchemy import select

from tests.conftest import Store
from tests.support.waiting import wait_for
from tests.types.mr.events_support import (
    apply_pending,
    build_event,
    check_resolution,
    counted,
    item,
    mr_event,
    new_item,
    pipeline_event,
)
from tests.types.mr.helpers import mr_registry
from wq.daemon.loop_events import ingest_on_loop
from wq.daemon.loop_reads import loop_reads
from wq.engine.db import Timeouts
from wq.engine.envelope import Event
from wq.engine.events import DEFAULT_MAX_FUTURE_SKEW, event_queries, ingest
from wq.engine.metrics import Metrics
from wq.engine.models import PendingEvent
from wq.engine.registry import TypeRegistry
from wq.engine.store import NOTIFY_CHANNEL, lock_item
from wq.engine.wakeup import EVENT_STORED, Wakeup


def on_loop(
    store: Store,
    registry: TypeRegistry,
    document: dict[str, Any],
    *,
    wakeup: Wakeup | None = None,
    metrics: Metrics | None = None,
) -> int:
    """Store one event as the webhook does on PostgreSQL; return for how many items."""
    queries = event_queries(registry, document["object_kind"])
    assert queries is not None, "the mr type resolves events by a lookup"

    async def run() -> int:
        async with loop_reads(store.engine, Timeouts(), size=1) as reads:
            assert reads is not None
            return await ingest_on_loop(
                reads,
                queries,
                Event(document["object_kind"], document),
                wakeup=wakeup or Wakeup(),
                metrics=metrics or Metrics(),
                source="webhook",
                max_future_skew=DEFAULT_MAX_FUTURE_SKEW,
            )

    return asyncio.run(run())


def deliver(store: Store, registry: TypeRegistry, document: dict[str, Any]) -> int:
    """`on_loop`, then apply what it stored."""
    stored = on_loop(store, registry, document)
    apply_pending(store, registry)
    return stored


def stored_rows(store: Store) -> list[tuple[Any, ...]]:
    """The stored events as (item, type, payload, event time), oldest first."""
    with store.sessions() as session:
        rows = session.execute(
            select(
                PendingEvent.work_item_id,
                PendingEvent.event_type,
                PendingEvent.payload,
                PendingEvent.event_at,
            ).order_by(PendingEvent.id)
        )
        return [tuple(row) for row in rows]


def test_resolution_on_the_loop_is_by_iid_else_by_the_branch_the_event_names(
    postgres_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = mr_registry(monkeypatch)
    check_resolution(postgres_store, registry, deliver)
    # Pipelines and jobs: by branch, and by the iid of a merge request pipeline's ref.
    fresh = new_item(postgres_store, registry, None, "wq/pipelines")
    assert deliver(postgres_store, registry, pipeline_event("success", 80, "wq/pipelines")) == 1
    assert item(postgres_store, fresh).head_pipeline_id == 80
    merge_ref = build_event(9, branch="refs/merge-requests/7/head", pipeline_id=81)
    assert deliver(postgres_store, registry, merge_ref) == 0  # no item has recorded MR 7


def test_the_loop_stores_what_the_session_path_stores(
    postgres_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = mr_registry(monkeypatch)
    new_item(postgres_store, registry, 1, "wq/sync-1")
    new_item(postgres_store, registry, 2, "wq/sync-2")
    events = [
        mr_event("approved", 1),
        pipeline_event("failed", 90, branch="wq/sync-2"),
        build_event(7, branch="wq/sync-1", pipeline_id=91),
        mr_event("update", 3, branch="wq/none"),
        {"object_kind": "note", "project": {"path_with_namespace": "group/project"}},
    ]
    by_session = []
    for document in events:
        by_session.append(
            ingest(
                postgres_store.sessions,
                registry,
                Event(document["object_kind"], document),
                source="t",
            )
        )
    expected = stored_rows(postgres_store)
    with postgres_store.sessions.begin() as session:
        session.query(PendingEvent).delete()
    assert [on_loop(postgres_store, registry, document) for document in events] == by_session
    assert by_session == [1, 1, 1, 0, 0]
    assert stored_rows(postgres_store) == expected


def test_the_loop_counts_refuses_the_far_future_and_tells_every_scheduler(
    postgres_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = mr_registry(monkeypatch)
    item_id = new_item(postgres_store, registry)
    metrics, wakeup = Metrics(), Wakeup()
    future = mr_event("update", updated_at="2999-01-01 00:00:00 UTC")
    assert on_loop(postgres_store, registry, future, wakeup=wakeup, metrics=metrics) == 0
    assert counted("future", metrics) == 1 and stored_rows(postgres_store) == []
    assert not wakeup.wait(0), "nothing stored, nobody woken"
    assert on_loop(postgres_store, registry, mr_event("merge", 99), metrics=metrics) == 0
    assert counted("unmatched", metrics) == 1
    with psycopg.connect(postgres_store.url, autocommit=True) as other_replica:
        other_replica.execute(f"LISTEN {NOTIFY_CHANNEL}")
        assert on_loop(
            postgres_store, registry, mr_event("approved"), wakeup=wakeup, metrics=metrics
        )
        heard = [notice.payload for notice in other_replica.notifies(timeout=5, stop_after=1)]
    assert heard == [f"{wakeup.origin}|{EVENT_STORED}:{item_id}"]
    assert wakeup.wait(0).event_items == {item_id}
    assert counted("stored", metrics) == 1 and counted("received", metrics) == 3
    assert [row[0] for row in stored_rows(postgres_store)] == [item_id]


def test_a_dead_idle_connection_is_replaced_before_anything_is_stored(
    postgres_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = mr_registry(monkeypatch)
    item_id = new_item(postgres_store, registry)
    document = mr_event("approved")
    queries = event_queries(registry, "merge_request")
    assert queries is not None

    async def run() -> int:
        async with loop_reads(postgres_store.engine, Timeouts(), size=1) as reads:
            assert reads is not None
            async with reads.connections.connection() as connection:
                backend = connection.info.backend_pid
            with psycopg.connect(postgres_store.url, autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", [backend])
            await asyncio.sleep(0.2)
            return await ingest_on_loop(
                reads,
                queries,
                Event("merge_request", document),
                wakeup=Wakeup(),
                metrics=Metrics(),
                source="webhook",
                max_future_skew=timedelta(minutes=5),
            )

    assert asyncio.run(run()) == 1
    assert [row[0] for row in stored_rows(postgres_store)] == [item_id]


def test_the_loop_waits_for_a_drain_that_holds_the_item(
    postgres_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The server computes the intake lock's key from the id: it must be the key a
    # drain holds (`lock_item`), or an event could be stored and applied out of order.
    registry = mr_registry(monkeypatch)
    item_id = new_item(postgres_store, registry)

    def waiting_for_an_advisory_lock() -> bool:
        with psycopg.connect(postgres_store.url, autocommit=True) as admin:
            row = admin.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND wait_event = 'advisory'"
            ).fetchone()
        return row is not None and row[0] == 1

    with ThreadPoolExecutor(1) as pool:
        with postgres_store.sessions.begin() as session:
            lock_item(session, item_id)
            intake = pool.submit(on_loop, postgres_store, registry, mr_event("approved"))
            wait_for(waiting_for_an_advisory_lock, message="the intake waits for the drain")
            assert stored_rows(postgres_store) == []
        assert intake.result(timeout=10) == 1
    assert [row[0] for row in stored_rows(postgres_store)] == [item_id]


def test_several_lookups_store_the_event_once_per_item(
    postgres_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = mr_registry(monkeypatch)
    registry.register_type(replace(registry.get("mr"), name="mr_again"))
    one = new_item(postgres_store, registry, 1, "wq/one")
    new_item(postgres_store, registry, 2, "wq/two")
    assert len(event_queries(registry, "merge_request") or []) == 2
    document = mr_event("approved", 1, branch="wq/one")
    assert (
        ingest(postgres_store.sessions, registry, Event("merge_request", document), source="t") == 1
    )
    expected = stored_rows(postgres_store)
    with postgres_store.sessions.begin() as session:
        session.query(PendingEvent).delete()
    assert on_loop(postgres_store, registry, document) == 1
    assert stored_rows(postgres_store) == expected
    assert [row[0] for row in expected] == [one]


def test_events_a_type_resolves_in_a_session_keep_the_session_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    registry = mr_registry(monkeypatch)
    lookup = registry.get("mr").event_query
    assert event_queries(registry, "note") == [lookup]
    # A type whose resolver may write (the task type's issue rules submit tasks), and
    # looks at notes only: notes keep the session's path, the mr type's kinds do not.
    writer = replace(registry.get("mr"), name="writer", event_query=None)
    registry.register_type(replace(writer, event_kinds=frozenset({"note"})))
    assert event_queries(registry, "note") is None
    assert event_queries(registry, "pipeline") == [lookup]
