"""The hot path's failure modes (issue 17): batch slots, batch threads, audit rows by COPY.

Each test pins a behaviour a user would notice: a failed scheduler pass reports the
database error it met (so an outage is logged as one, not as a bug), a batch thread's
end is always counted (so `stop` does not wait out its grace), and audit rows written
by COPY on PostgreSQL are stored and fail as the INSERT that SQLite uses does.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from sqlalchemy import exc as sa_exc
from sqlalchemy import insert, select, text

from tests.conftest import Store, make_config
from tests.engine.helpers import load, submit_many
from tests.support.chain import Behaviour, chain_registry, chain_type
from tests.support.waiting import wait_for
from wq.engine import leases
from wq.engine.admission import dispatch
from wq.engine.audit import AUDIT_TABLE, AuditRecord, audit
from wq.engine.batch_threads import BATCHES_IN_FLIGHT
from wq.engine.models import AuditEntry, utcnow
from wq.engine.outage import is_unavailable
from wq.engine.processing import ProcessingManager
from wq.engine.registry import ActionContext, TypeRegistry

BIG_POOLS = {"default": {"capacity": 1000, "alert_capacity": 1}}


def database_down(*_: Any, **__: Any) -> Any:
    """What a claim raises while the database is unreachable."""
    raise sa_exc.OperationalError("SELECT ... FOR UPDATE SKIP LOCKED", {}, OSError("refused"))


def free_batch_slots(manager: ProcessingManager) -> int:
    """How many batch slots can be taken right now (they are given back after)."""
    taken = 0
    while taken <= BATCHES_IN_FLIGHT and manager._batch_threads.slots.acquire(blocking=False):
        taken += 1
    for _ in range(taken):
        manager._batch_threads.slots.release()
    return taken


def join_batch_threads() -> None:
    for thread in threading.enumerate():
        if thread.name == "wq-batch":
            thread.join(timeout=10)
            assert not thread.is_alive()


class BlockingStep1:
    """A cheap step1 that waits until the test lets it go."""

    def __init__(self, behaviour: Behaviour) -> None:
        self.entered = threading.Event()
        self.go = threading.Event()
        self._step1 = chain_type(behaviour, cheap=True).executors["step1"]

    def __call__(self, ctx: ActionContext) -> None:
        self.entered.set()
        assert self.go.wait(10)
        self._step1(ctx)


@pytest.fixture
def blocking() -> Iterator[BlockingStep1]:
    step = BlockingStep1(Behaviour())
    yield step
    step.go.set()  # never leave a batch thread waiting
    join_batch_threads()


def cheap_registry(step1: BlockingStep1 | None = None) -> TypeRegistry:
    chain = chain_type(Behaviour(), cheap=True)
    if step1 is not None:
        chain = replace(chain, executors={**chain.executors, "step1": step1})
    registry = TypeRegistry()
    registry.register_type(chain)
    return registry


# ------------------------------------------------------------ batch slots and threads


def test_a_batch_that_meets_an_outage_reports_it_and_gives_its_slot_back(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine logs an outage as an outage, and the slot is free for the next batch."""
    config = make_config(store.url, pools=BIG_POOLS)
    manager = ProcessingManager(store.sessions, cheap_registry(), config, owner="solo")
    reported: list[BaseException] = []
    monkeypatch.setattr(manager.failures, "failed", lambda _what, err: reported.append(err))
    monkeypatch.setattr(leases, "lock_claimable", database_down)
    manager._scheduler._pass(projects=set(), event_items=frozenset(), background=True)
    join_batch_threads()
    assert len(reported) == 1 and is_unavailable(reported[0]), reported
    assert (manager._batch_threads.running, free_batch_slots(manager)) == (0, BATCHES_IN_FLIGHT)


def test_a_failed_batch_beside_a_running_one_keeps_the_batch_count(
    store: Store, monkeypatch: pytest.MonkeyPatch, blocking: BlockingStep1
) -> None:
    """A batch that fails while another runs frees its own slot only.

    Else the slots are over-released (three batches may run), or the running batch's
    end is not counted and `stop` waits for it until its grace is over.
    """
    config = make_config(store.url, pools=BIG_POOLS)
    (item_id,) = submit_many(store.sessions, cheap_registry(), config, ["g/p"])
    dispatch(store.sessions, config, clock=utcnow)
    manager = ProcessingManager(store.sessions, cheap_registry(blocking), config, owner="solo")
    monkeypatch.setattr(manager.failures, "failed", lambda _what, _err: None)
    try:
        manager._scheduler._pass(projects=set(), event_items=frozenset(), background=True)
        assert blocking.entered.wait(10)  # the batch runs on its own thread
        monkeypatch.setattr(leases, "lock_claimable", database_down)
        manager._scheduler._pass(projects=set(), event_items=frozenset(), background=True)
        deadline = time.monotonic() + 10
        while manager._batch_threads.running > 1 and time.monotonic() < deadline:
            time.sleep(0.01)  # the failing batch ends
        free_while_it_runs = free_batch_slots(manager)  # the first batch still holds one
        blocking.go.set()
        join_batch_threads()
        assert load(store.sessions, item_id).admission == "idle"
        # (free slots while it ran, batches still counted, free slots after)
        assert (free_while_it_runs, manager._batch_threads.running, free_batch_slots(manager)) == (
            BATCHES_IN_FLIGHT - 1,
            0,
            BATCHES_IN_FLIGHT,
        )
    finally:
        blocking.go.set()
        manager.stop(grace=0.5)


def test_an_error_handing_a_batch_to_workers_gives_its_slot_back_once(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batch committed; starting its workers failed (in production: `drop_lease`
    for the surplus, the database gone): reported, the slot back, the end counted."""
    behaviour = Behaviour()
    chain = chain_type(behaviour, cheap=True)
    registry = TypeRegistry()
    registry.register_type(replace(chain, cheap_actions=frozenset({"step1"})))
    config = make_config(store.url, pools=BIG_POOLS)
    submit_many(store.sessions, registry, config, ["g/p"])
    dispatch(store.sessions, config, clock=utcnow)
    manager = ProcessingManager(store.sessions, registry, config, owner="solo")
    reported: list[BaseException] = []
    monkeypatch.setattr(manager.failures, "failed", lambda _what, err: reported.append(err))
    monkeypatch.setattr(manager._handoff, "hand_over", database_down)
    manager._scheduler._pass(projects=set(), event_items=frozenset(), background=True)
    join_batch_threads()
    assert len(reported) == 1 and is_unavailable(reported[0]), reported
    assert (manager._batch_threads.running, free_batch_slots(manager)) == (0, BATCHES_IN_FLIGHT)
    assert [action for _, action in behaviour.calls] == ["step1"]


def test_an_action_failed_in_a_background_batch_is_retried_after_its_backoff(
    store: Store, managers: list[Any]
) -> None:
    """A batch that ends without releasing anything must still wake the scheduler.

    A failed cheap action backs off and signals nothing (a decider's `Wait` is the
    same): the retry must come after the backoff, not after the poll interval or a
    lease period.
    """
    behaviour = Behaviour(fail_times={"step1": 1})
    config = make_config(
        store.url,
        pools=BIG_POOLS,
        processing={"poll_interval_seconds": 60.0, "lease_seconds": 60.0},
    )
    registry = chain_registry(behaviour, cheap=True)
    (item_id,) = submit_many(store.sessions, registry, config, ["g/p"])
    manager = ProcessingManager(store.sessions, registry, config, owner="solo")
    manager.start()
    managers.append(manager)
    # The backoff is at most 0.2 s (backoff_max_seconds of the test config).
    wait_for(
        lambda: load(store.sessions, item_id).admission == "idle",
        timeout=5,
        message="the retried item idle",
    )
    assert behaviour.actions_of(item_id) == ["step1", "step1", "step2", "step3"]


def test_a_batch_thread_that_cannot_start_is_not_counted(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the thread cannot start ("can't start new thread" under a pids limit), the
    batch is not counted: `stop` would wait out its whole grace for it."""
    config = make_config(store.url, pools=BIG_POOLS)
    registry = chain_registry(Behaviour(), cheap=True)
    submit_many(store.sessions, registry, config, ["g/p"])
    dispatch(store.sessions, config, clock=utcnow)
    manager = ProcessingManager(store.sessions, registry, config, owner="solo")
    real_start = threading.Thread.start

    def start(thread: threading.Thread) -> None:
        if thread.name == "wq-batch":
            raise RuntimeError("can't start new thread")
        real_start(thread)

    monkeypatch.setattr(threading.Thread, "start", start)
    with pytest.raises(RuntimeError):
        manager._scheduler._pass(projects=set(), event_items=frozenset(), background=True)
    assert manager._batch_threads.running == 0


# ------------------------------------------------------------ audit rows (COPY on PostgreSQL)


def test_absent_audit_fields_are_stored_as_an_insert_stores_them(store: Store) -> None:
    """COPY writes None as SQL NULL; the JSON type's INSERT writes JSON null.

    Before COPY both databases stored JSON null; now PostgreSQL stores SQL NULL for
    new rows (old rows keep JSON null) while SQLite stores JSON null: a query such as
    `metadata IS NULL` answers differently by database and by the row's age.
    """
    record = AuditRecord(
        "probe", "me", uuid.uuid4(), new_state={"a": 1}, trigger={"source": "test"}
    )
    with store.sessions() as session:
        audit(session, replace(record, event_type="by_audit"))
        session.execute(insert(AUDIT_TABLE), [replace(record, event_type="by_insert").row()])
        session.commit()
    with store.sessions() as session:
        nulls = dict(
            session.execute(
                select(
                    AuditEntry.event_type,
                    text("old_state IS NULL AND metadata IS NULL"),
                ).where(AuditEntry.event_type.in_(["by_audit", "by_insert"]))
            ).all()
        )
    assert nulls["by_audit"] == nulls["by_insert"], nulls


TRICKY = ["tab\there", "line\nbreak", "back\\slash", "\\N", "é\u2028\U0001f600", '"q"']


def test_audit_rows_keep_every_character_they_were_given(store: Store) -> None:
    """COPY's text format escapes what INSERT binds: the rows read back as written."""
    with store.sessions() as session:
        for value in TRICKY:
            audit(
                session,
                AuditRecord(
                    "tricky",
                    value,
                    None,
                    old_state={"s": value},
                    trigger={"source": "test", "reason": value},
                    metadata={value: [value, 1.5, True, None]},
                ),
            )
        session.commit()
    with store.sessions() as session:
        rows = (
            session.execute(
                select(AuditEntry).where(AuditEntry.event_type == "tricky").order_by(AuditEntry.id)
            )
            .scalars()
            .all()
        )
    assert [row.actor for row in rows] == TRICKY
    for value, row in zip(TRICKY, rows, strict=True):
        assert row.old_state == {"s": value}
        assert row.trigger == {"source": "test", "reason": value}
        assert row.extra == {value: [value, 1.5, True, None]}


def test_a_database_error_writing_audit_rows_is_an_sqlalchemy_error(store: Store) -> None:
    """The engine and the API tell an outage from a bug by SQLAlchemy's error classes.

    The COPY runs on the raw psycopg cursor, so its errors arrive unwrapped
    (`psycopg.errors.*`): not a `DBAPIError`, never `is_unavailable`. Here the audit
    table is missing (renamed inside the transaction, undone by its rollback).
    """
    with store.sessions() as session:
        session.execute(text("ALTER TABLE audit_log RENAME TO audit_log_away"))
        audit(session, AuditRecord("probe", "me", None, trigger={"source": "test"}))
        with pytest.raises(Exception) as raised:
            session.commit()
        session.rollback()
    assert isinstance(raised.value, sa_exc.DBAPIError), repr(raised.value)
    with store.sessions() as session:  # the rename was rolled back
        assert session.execute(select(AuditEntry.id)).first() is None
