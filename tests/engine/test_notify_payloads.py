"""Signals to other replicas: one NOTIFY a kind per transaction, its subjects a line each.

A worker's group frees slots in many projects at once; each replica's listener used to
wake once per project. Payloads stay under PostgreSQL's 8,000 bytes whatever the
projects' names, and every subject reaches the other replicas.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import text

from tests.conftest import Store, make_config
from tests.engine.helpers import claimed, submit
from tests.support.chain import Behaviour, chain_registry
from wq.engine import store as store_ops
from wq.engine.admission import dispatch
from wq.engine.dimensions import set_dimension
from wq.engine.listener import NotifyListener
from wq.engine.models import WorkItem, utcnow
from wq.engine.runner import ItemRunner
from wq.engine.wakeup import (
    ITEMS_ADMITTED,
    PROJECT_QUEUED,
    WAKEUP_KEY,
    Wakeup,
    payloads_of,
    signal,
)

# The longest project wq takes, in characters of four bytes each.
LONG = "\U0001f600" * 500


def test_a_kinds_subjects_go_in_one_payload_and_each_arrives() -> None:
    signals = [
        (PROJECT_QUEUED, "a/b"),
        (ITEMS_ADMITTED, ""),
        (PROJECT_QUEUED, "c/d"),
        (PROJECT_QUEUED, "a/b"),
    ]
    payloads = payloads_of(signals)
    assert payloads == ["queued:a/b\nc/d", "admitted:"]
    hub = Wakeup()
    for payload in payloads:
        hub.deliver_payload(payload)
    pending = hub.wait(0)
    assert pending.projects == {"a/b", "c/d"} and pending.claim


def test_long_names_split_into_payloads_postgres_takes() -> None:
    projects = [f"g{n}/{LONG}" for n in range(30)]
    payloads = payloads_of([(PROJECT_QUEUED, project) for project in projects])
    assert len(payloads) > 1
    assert all(len(f"{'f' * 12}|{payload}".encode()) < 8000 for payload in payloads)
    hub = Wakeup()
    for payload in payloads:
        hub.deliver_payload(payload)
    assert hub.wait(0).projects == set(projects)


class Replica:
    """Another replica's hub, told by its own `LISTEN`, and the raw payloads it got."""

    def __init__(self, store: Store) -> None:
        self.hub = Wakeup()
        self.payloads: list[str] = []
        self._raw = store.engine.connect()
        self._raw.execute(text(f"LISTEN {store_ops.NOTIFY_CHANNEL}"))
        self._raw.commit()
        self._listener = NotifyListener(store.engine, self.hub)
        self._listener.start()
        assert self._listener.wait_ready(10), "LISTEN did not take effect"

    def projects_told(self, expected: set[str]) -> set[str]:
        """The projects this replica's hub was told of, once `expected` all came (or 5 s)."""
        told: set[str] = set()
        deadline = time.monotonic() + 5
        while not expected <= told and time.monotonic() < deadline:
            told |= self.hub.wait(0.1).projects
        driver = self._raw.connection.driver_connection
        self.payloads = [note.payload for note in driver.notifies(timeout=0.5)]
        return told

    def close(self) -> None:
        self._listener.stop()
        self._raw.close()


@pytest.fixture
def replica(store: Store) -> Iterator[Replica]:
    if store.dialect != "postgresql":
        pytest.skip("NOTIFY is PostgreSQL's")
    other = Replica(store)
    yield other
    other.close()


def grouped_and_run(store: Store, projects: list[str]) -> tuple[ItemRunner, Any]:
    """One admitted chain item in each project, run in a worker's group, not stored."""
    behaviour = Behaviour()
    registry = chain_registry(behaviour)
    config = make_config(store.url)
    for project in projects:
        item_id = submit(store.sessions, registry, config, project).item.id  # type: ignore[union-attr]
        with store.sessions.begin() as session:
            found = session.get(WorkItem, item_id)
            set_dimension(session, found, "needs_step1", False)
            set_dimension(session, found, "needs_step2", False)
    dispatch(store.sessions, config, clock=utcnow)
    runner = ItemRunner(store.sessions, registry, config.processing, utcnow, threading.Event())
    group = runner.new_group()
    for claim in claimed(store.sessions, registry, len(projects)):
        assert runner.run(claim.id, claim.token, "me/worker-0", item=claim.item, group=group)
    return runner, group


def test_a_group_release_tells_other_replicas_of_its_projects_in_one_notify(
    store: Store, replica: Replica
) -> None:
    projects = [f"g/p{n}" for n in range(6)]
    runner, group = grouped_and_run(store, projects)
    replica.projects_told(set())  # what the submissions and the admission told
    runner.finish(group)
    assert replica.projects_told(set(projects)) == set(projects)
    payload = replica.payloads[0].partition("|")[2]
    assert len(replica.payloads) == 1 and payload == "queued:" + "\n".join(sorted(projects))


def test_a_group_in_projects_of_long_names_splits_its_notify_and_tells_each(
    store: Store, replica: Replica
) -> None:
    projects = [f"g{n}/{LONG}" for n in range(8)]
    runner, group = grouped_and_run(store, projects)
    replica.projects_told(set())
    runner.finish(group)
    assert replica.projects_told(set(projects)) == set(projects)
    assert len(replica.payloads) > 1
    assert all(len(payload.encode()) < 8000 for payload in replica.payloads)


def test_a_transactions_signals_go_out_one_notify_a_kind(store: Store, replica: Replica) -> None:
    mine = Wakeup()
    projects = [f"g/p{n}" for n in range(5)] + [f"g/{LONG}"] * 2
    with store.sessions.begin() as session:
        session.info[WAKEUP_KEY] = mine
        for project in projects:
            signal(session, PROJECT_QUEUED, project)
        signal(session, ITEMS_ADMITTED)
    assert replica.projects_told(set(projects)) == set(projects)
    assert sorted(payload.split(":")[0] for payload in replica.payloads) == [
        f"{mine.origin}|admitted",
        f"{mine.origin}|queued",
    ]
    assert mine.wait(0).projects == set(projects)  # and this replica's own hub, in-process
