"""An admission's time is taken once its pass holds the admission lock.

Across replicas, a pass may wait for another's lock: stamped with the time it started,
its admissions (later seqs) could carry an earlier `admitted_at` than the ones it
waited for, and the queue's order in time would contradict its order by seq. Only
PostgreSQL has replicas waiting for each other's passes (SQLite's one process takes
its lock at BEGIN, before the pass).
"""

from __future__ import annotations

import threading
import uuid

import pytest
from sqlalchemy import select, text

from tests.conftest import Store
from tests.engine.test_admission import config_for, enqueue
from tests.support.waiting import wait_for
from wq.engine import admission_statements
from wq.engine.admission import admit, dispatch
from wq.engine.models import WorkItem, utcnow


def waiting_for_an_advisory_lock(store: Store) -> bool:
    """True while some session of the test's database waits for an advisory lock."""
    with store.engine.connect() as connection:
        return bool(
            connection.execute(
                text(
                    "SELECT count(*) FROM pg_locks JOIN pg_database d ON d.oid = database"
                    " WHERE locktype = 'advisory' AND NOT granted"
                    " AND d.datname = current_database()"
                )
            ).scalar_one()
        )


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_a_pass_that_waited_for_another_replicas_admits_no_earlier_than_it(
    store: Store,
) -> None:
    config = config_for(store, capacity=1)
    first = enqueue(store, config, project="g/a")
    later = enqueue(store, config, project="g/b")  # the larger seq
    waiting: list[uuid.UUID] = []
    # Replica A's pass has the lock and has not admitted yet; replica B's starts.
    holder = store.sessions()
    holder.begin()
    assert admission_statements.lock_admission(holder, ["g/a"])  # g/a has queued work
    try:
        other = threading.Thread(
            target=lambda: waiting.extend(
                entry.id for entry in dispatch(store.sessions, config, ["g/b"], clock=utcnow)
            )
        )
        other.start()
        wait_for(lambda: waiting_for_an_advisory_lock(store), message="B waiting for the lock")
        assert [entry.id for entry in admit(holder, config, ["g/a"], utcnow)] == [first]
        holder.commit()
    finally:
        holder.close()
    other.join(timeout=10)
    assert waiting == [later]

    with store.sessions() as session:
        rows = session.execute(
            select(WorkItem.id, WorkItem.seq, WorkItem.admitted_at).order_by(WorkItem.seq)
        ).all()
    assert [row.id for row in rows] == [first, later]
    assert rows[0].admitted_at is not None and rows[1].admitted_at is not None
    assert rows[1].admitted_at >= rows[0].admitted_at, "a later seq admitted earlier"
