"""The engine's work over many items never waits for one row another transaction holds.

A row locked elsewhere (an operator's open session, a long bulk change) is skipped by
a heartbeat, which extends every other lease, and by the sweep, which queues every
other item whose deferral came due; the skipped item is taken up again once its row is
free. (Claims: `test_claim_locks`; admission: `test_admission_locks`; a worker's group:
`test_finish_group`.)

PostgreSQL only: SQLite has one writer at a time, taken at BEGIN, and no row locks.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import Connection, text

from tests.conftest import Store, make_config
from tests.engine.helpers import load, submit
from tests.support.chain import Behaviour, chain_registry
from tests.support.waiting import wait_for
from wq.engine.dimensions import set_dimension
from wq.engine.models import WorkItem, utcnow
from wq.engine.processing import ProcessingManager
from wq.engine.sweep import sweep_once

pytestmark = pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)

# A statement that waited for the row would last the statement timeout (10 s), then fail.
AT_ONCE_SECONDS = 5


@pytest.fixture
def holder(store: Store) -> Iterator[Connection]:
    """A connection of another client, whose transaction ends with the test."""
    with store.engine.connect() as connection:
        yield connection
        connection.rollback()


def lock(connection: Connection, item_id: Any) -> None:
    connection.execute(text("SELECT id FROM work_items WHERE id = :id FOR UPDATE"), {"id": item_id})


def test_a_heartbeat_extends_every_lease_but_that_of_a_row_another_transaction_holds(
    store: Store, managers: list[Any], holder: Connection
) -> None:
    behaviour = Behaviour(sleep={"step1": 4.0})
    # Leases of a minute: the heartbeat's own loop (every 20 s) stays out of the way.
    config = make_config(store.url, processing={"lease_seconds": 60.0})
    registry = chain_registry(behaviour)
    held = submit(store.sessions, registry, config, "team/held").item.id  # type: ignore[union-attr]
    free = submit(store.sessions, registry, config, "team/free").item.id  # type: ignore[union-attr]
    manager = ProcessingManager(store.sessions, registry, config)
    manager.start()
    managers.append(manager)
    wait_for(lambda: behaviour.actions_of(held) and behaviour.actions_of(free), message="running")
    before = load(store.sessions, free).leased_until
    assert before is not None

    lock(holder, held)
    started = time.monotonic()
    extended = manager.heartbeat()
    assert time.monotonic() - started < AT_ONCE_SECONDS
    holder.rollback()

    assert extended == 1
    after = load(store.sessions, free).leased_until
    assert after is not None and after > before


def test_the_sweep_queues_every_due_item_but_one_another_transaction_holds(
    store: Store, holder: Connection
) -> None:
    registry = chain_registry(Behaviour())
    config = make_config(store.url)
    held, free = (
        submit(store.sessions, registry, config, project).item.id  # type: ignore[union-attr]
        for project in ("team/held", "team/free")
    )
    due = utcnow() - timedelta(seconds=1)
    with store.sessions.begin() as session:
        for item_id in (held, free):
            item = session.get(WorkItem, item_id)
            assert item is not None
            item.admission = "idle"  # waiting for its deferral
            set_dimension(session, item, "needs_step1", True, pending_until=due)

    lock(holder, held)
    started = time.monotonic()
    report = sweep_once(store.sessions, registry, config)
    assert time.monotonic() - started < AT_ONCE_SECONDS
    assert report.deferrals_due == 1
    assert load(store.sessions, free).admission == "queued"
    assert load(store.sessions, held).admission == "idle"

    holder.rollback()  # the next sweep takes it
    assert sweep_once(store.sessions, registry, config).deferrals_due == 1
    assert load(store.sessions, held).admission == "queued"
