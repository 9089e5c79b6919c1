"""The failed items' count the database keeps: the gauge equals a plain count through
failures, retries, deletions, concurrent failures and the sweep's folding."""

from __future__ import annotations

import threading
import uuid

import pytest
from sqlalchemy import delete, func, select

from tests.conftest import Store
from tests.engine.helpers import submit
from tests.support.chain import Behaviour, chain_registry
from wq.engine import items
from wq.engine.failed_counts import failed_per_type, fold
from wq.engine.metrics_db import read_snapshot
from wq.engine.models import DONE, FAILED, FailedCount, WorkItem, utcnow
from wq.engine.registry import TypeRegistry
from wq.engine.sweep import sweep_once


@pytest.fixture
def registry() -> TypeRegistry:
    return chain_registry(Behaviour())


def fail(store: Store, item_id: uuid.UUID) -> None:
    with store.sessions.begin() as session:
        item = session.get(WorkItem, item_id)
        assert item is not None
        items.set_phase(session, item, FAILED, actor="test", trigger={"source": "test"})


def counted(store: Store) -> int:
    """What the gauge reads, and a plain count of the rows, which must agree."""
    with store.sessions() as session:
        gauge = read_snapshot(session, ["chain"]).items.get(("chain", FAILED, DONE), 0)
        plain = session.scalar(
            select(func.count()).select_from(WorkItem).where(WorkItem.phase == FAILED)
        )
    assert gauge == plain
    return gauge


def test_the_gauge_follows_failures_retries_and_deletions(
    store: Store, registry: TypeRegistry
) -> None:
    ids = [submit(store.sessions, registry, store.config).item.id for _ in range(5)]
    assert counted(store) == 0
    for item_id in ids[:4]:
        fail(store, item_id)
    assert counted(store) == 4
    with store.sessions.begin() as session:
        items.retry(session, ids[0], registry=registry, now=utcnow(), actor="test")
    assert counted(store) == 3
    with store.sessions.begin() as session:
        session.execute(delete(WorkItem).where(WorkItem.id == ids[1]))
    assert counted(store) == 2
    # A change that leaves the phase alone adds nothing.
    with store.sessions.begin() as session:
        item = session.get(WorkItem, ids[2])
        assert item is not None
        item.error = "looked at again"
        item.phase = FAILED
    assert counted(store) == 2


def test_the_sweep_folds_the_rows_into_one_per_type(store: Store, registry: TypeRegistry) -> None:
    ids = [submit(store.sessions, registry, store.config).item.id for _ in range(6)]
    for item_id in ids:
        fail(store, item_id)
    with store.sessions.begin() as session:
        items.retry(session, ids[0], registry=registry, now=utcnow(), actor="test")
    with store.sessions() as session:
        assert session.scalar(select(func.count()).select_from(FailedCount)) == 7
    report = sweep_once(store.sessions, registry, store.config)
    assert report.failed_counts_folded == 7
    with store.sessions() as session:
        assert session.execute(select(FailedCount.type, FailedCount.delta)).all() == [("chain", 5)]
    assert counted(store) == 5
    # Back to none: the folded row goes too.
    for item_id in ids[1:]:
        with store.sessions.begin() as session:
            items.retry(session, item_id, registry=registry, now=utcnow(), actor="test")
    with store.sessions.begin() as session:
        fold(session)
    with store.sessions() as session:
        assert session.scalar(select(func.count()).select_from(FailedCount)) == 0
        assert failed_per_type(session, ["chain"]) == {}
    assert counted(store) == 0


def test_concurrent_failures_are_all_counted(store: Store, registry: TypeRegistry) -> None:
    ids = [submit(store.sessions, registry, store.config).item.id for _ in range(40)]
    errors: list[BaseException] = []

    def fail_some(share: list[uuid.UUID]) -> None:
        try:
            for item_id in share:
                fail(store, item_id)
        except BaseException as err:  # reported below
            errors.append(err)

    threads = [threading.Thread(target=fail_some, args=(ids[k::4],)) for k in range(4)]
    for thread in threads:
        thread.start()
    # The sweep folds while failures go on: nothing summed twice or lost.
    with store.sessions.begin() as session:
        fold(session)
    for thread in threads:
        thread.join()
    assert errors == []
    assert counted(store) == 40
