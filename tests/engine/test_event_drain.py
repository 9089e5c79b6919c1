"""The scheduler's event drain: an item locked elsewhere waits without holding up the
others, and an event stored while an item was active never changes it once terminal."""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import select, text, update

from tests.conftest import Store, make_config
from tests.engine.helpers import Listening, load, statements_during, submit
from tests.support.chain import Behaviour, chain_registry
from tests.support.waiting import wait_for
from wq.engine import items
from wq.engine.config import Config
from wq.engine.dimensions import set_dimension
from wq.engine.events import drain_events, drain_events_of, store_event, store_events
from wq.engine.models import PendingEvent, WorkItem, WorkItemStatus, utcnow
from wq.engine.processing import ProcessingManager
from wq.engine.registry import TypeRegistry
from wq.engine.store import lock_item
from wq.engine.wakeup import WAKEUP_KEY, Wakeup


def pending(store: Store, item_id: uuid.UUID) -> int:
    with store.sessions() as session:
        return len(
            session.execute(
                select(PendingEvent.id).where(PendingEvent.work_item_id == item_id)
            ).all()
        )


def step3_needed(store: Store, item_id: uuid.UUID) -> bool:
    status = load(store.sessions, item_id).status("needs_step3")
    return status is not None and status.status == "true"


def dimensions(store: Store, item_id: uuid.UUID) -> list[tuple[str, str, Any]]:
    with store.sessions() as session:
        rows = session.execute(
            select(WorkItemStatus)
            .where(WorkItemStatus.work_item_id == item_id)
            .order_by(WorkItemStatus.dimension)
        ).scalars()
        return [(row.dimension, row.status, row.updated_at) for row in rows]


def with_redo_events(
    store: Store, registry: TypeRegistry, config: Config, count: int
) -> list[uuid.UUID]:
    """`count` chain items, each with a stored `redo` event."""
    ids = [submit(store.sessions, registry, config).item.id for _ in range(count)]  # type: ignore[union-attr]
    with store.sessions.begin() as session:
        for item_id in ids:
            store_event(session, item_id, "redo", {})
    return ids


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_an_item_locked_elsewhere_is_skipped_and_drained_once_it_is_free(
    store: Store, managers: list[Any], caplog: pytest.LogCaptureFixture
) -> None:
    behaviour = Behaviour()
    registry = chain_registry(behaviour)
    config = make_config(store.url)
    held_item = submit(store.sessions, registry, config).item
    free_item = submit(store.sessions, registry, config).item
    assert held_item is not None and free_item is not None
    manager = ProcessingManager(store.sessions, registry, config)
    manager.start()
    managers.append(manager)
    wait_for(
        lambda: all(
            load(store.sessions, i).admission == "idle" for i in (held_item.id, free_item.id)
        ),
        message="both idle",
    )
    caplog.set_level(logging.INFO)
    # Another transaction has changed the item's row and not committed yet (an event
    # can still be stored for it: that needs only a key share lock).
    holder = store.engine.connect()
    try:
        holder.execute(
            text("UPDATE work_items SET updated_at = updated_at WHERE id = :id"),
            {"id": held_item.id},
        )
        with manager.sessions.begin() as session:  # the manager's hub hears them
            store_event(session, held_item.id, "redo", {})
            store_event(session, free_item.id, "redo", {})
        # Far sooner than the statement timeout the drain used to wait out.
        wait_for(
            lambda: behaviour.actions_of(free_item.id).count("step3") == 2,
            timeout=5,
            message="B's event applied and its step3 run again",
        )
        assert pending(store, held_item.id) == 1
        assert not step3_needed(store, held_item.id)
    finally:
        holder.rollback()
        holder.close()
    wait_for(lambda: not pending(store, held_item.id), timeout=5, message="A applied after")
    wait_for(lambda: behaviour.actions_of(held_item.id).count("step3") == 2, message="A redone")
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_an_event_stored_while_active_changes_nothing_once_the_item_is_cancelled(
    store: Store,
) -> None:
    registry = chain_registry(Behaviour())
    config = make_config(store.url)
    intake = submit(store.sessions, registry, config)
    assert intake.item is not None
    item_id = intake.item.id
    with store.sessions.begin() as session:  # no scheduler: the event waits
        store_event(session, item_id, "redo", {})
    with store.sessions.begin() as session:
        items.cancel(session, item_id, registry=registry, now=utcnow(), actor="test")
    before = dimensions(store, item_id)
    cancelled = load(store.sessions, item_id)

    with store.sessions.begin() as session:
        result = drain_events(session, item_id, registry)

    assert dimensions(store, item_id) == before  # needs_step3 not set again
    assert (result.applied, result.discarded) == (0, 1)
    assert pending(store, item_id) == 0
    after = load(store.sessions, item_id)
    assert (after.phase, after.admission, after.updated_at) == (
        "cancelled",
        cancelled.admission,
        cancelled.updated_at,
    )


def test_one_item_whose_events_cannot_be_applied_holds_up_no_other(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """The scheduler applies many items' events in one transaction; when that fails
    (here the decider of one item raises when its event is settled), the others are
    applied item by item and the failing one is left for the sweep."""
    behaviour = Behaviour()
    registry = chain_registry(behaviour)
    config = make_config(store.url)
    ids = [submit(store.sessions, registry, config).item.id for _ in range(3)]  # type: ignore[union-attr]
    broken = ids[1]
    chain = registry.get("chain")
    decide = chain.decider

    def decider(item: Any, now: Any) -> Any:
        if item.id == broken:
            raise RuntimeError("this decider is broken")
        return decide(item, now)

    registry = TypeRegistry()
    registry.register_type(dataclasses.replace(chain, decider=decider))
    with store.sessions.begin() as session:
        for item_id in ids:
            # Idle, as after their last action: an event settles them with their decider.
            session.execute(update(WorkItem).where(WorkItem.id == item_id).values(admission="idle"))
            store_event(session, item_id, "redo", {})
    manager = ProcessingManager(store.sessions, registry, config)
    caplog.set_level(logging.INFO)

    manager.run_once(projects=set(), event_items=set(ids))

    assert [pending(store, item_id) for item_id in ids] == [0, 1, 0]
    assert step3_needed(store, ids[0]) and step3_needed(store, ids[2])
    assert not step3_needed(store, broken)
    failures = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert failures == [f"applying the events of work item {broken} failed"]


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_an_item_whose_intake_is_storing_an_event_waits_the_others_go_on(store: Store) -> None:
    """Many items' intake locks are tried by one statement: an item whose intake holds
    its lock (an event being stored, not committed) is left for later, the others are
    applied."""
    registry = chain_registry(Behaviour())
    config = make_config(store.url)
    ids = with_redo_events(store, registry, config, 3)
    intake = store.sessions()
    try:
        with intake.begin():
            # What storing an event takes first: the item's intake lock, until commit
            # (no row lock yet, so only that lock keeps the drain off the item).
            lock_item(intake, ids[1])
            with store.sessions.begin() as session:
                results = drain_events_of(session, ids, registry)
        assert [results[item_id].locked for item_id in ids] == [False, True, False]
        assert [results[item_id].applied for item_id in ids] == [1, 0, 1]
    finally:
        intake.close()
    assert [pending(store, item_id) for item_id in ids] == [0, 1, 0]
    with store.sessions.begin() as session:
        assert drain_events_of(session, [ids[1]], registry)[ids[1]].applied == 1
    assert pending(store, ids[1]) == 0


def savepoints_during(store: Store, work: Callable[[], Any]) -> int:
    """How many SAVEPOINTs `work()` sent."""
    return statements_during(
        store.engine, work, lambda sql: sql.lstrip().upper().startswith("SAVEPOINT")
    )


def test_the_scheduler_applies_events_without_a_savepoint_each_unless_a_handler_raises(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    registry = chain_registry(Behaviour())
    config = make_config(store.url)
    ids = with_redo_events(store, registry, config, 3)
    manager = ProcessingManager(store.sessions, registry, config)
    applied = lambda: manager.run_once(projects=set(), event_items=set(ids))  # noqa: E731
    assert savepoints_during(store, applied) == 0
    assert [pending(store, item_id) for item_id in ids] == [0, 0, 0]
    assert all(step3_needed(store, item_id) for item_id in ids)

    # A handler that writes, then raises: applied again with a savepoint per event, so
    # its write is not stored and the other items' events are.
    chain = registry.get("chain")
    bad = ids[1]

    def handler(ctx: Any) -> None:
        if ctx.item.id == bad:
            set_dimension(ctx.session, ctx.item, "touched", True)
            raise RuntimeError("this handler is broken")
        chain.event_handler(ctx)  # type: ignore[misc]

    broken = TypeRegistry()
    broken.register_type(dataclasses.replace(chain, event_handler=handler))
    with store.sessions.begin() as session:
        for item_id in ids:
            set_dimension(session, session.get(WorkItem, item_id), "needs_step3", False)
            store_event(session, item_id, "redo", {})
    manager = ProcessingManager(store.sessions, broken, config)
    caplog.set_level(logging.ERROR)
    assert savepoints_during(store, lambda: manager.run_once(projects=set(), event_items=set(ids)))
    assert [pending(store, item_id) for item_id in ids] == [0, 0, 0]
    assert step3_needed(store, ids[0]) and step3_needed(store, ids[2])
    assert not step3_needed(store, bad)
    assert "touched" not in [dimension for dimension, _, _ in dimensions(store, bad)]
    assert [r.getMessage() for r in caplog.records if "failed; discarded" in r.getMessage()]


def test_what_the_scheduler_applies_is_stored_and_changes_the_items_stamp(store: Store) -> None:
    # The stamp tells a worker holding the item that it changed under it
    # (wq.engine.runner): the scheduler's writes (plain statements on PostgreSQL) must
    # give it a fresh one, and only to the items whose events changed something.
    registry = chain_registry(Behaviour())
    chain = registry.get("chain")

    def handler(ctx: Any) -> None:
        if ctx.event_type == "redo":
            set_dimension(ctx.session, ctx.item, "needs_step3", True, detail={"why": "redo"})
            set_dimension(ctx.session, ctx.item, "seen", True)
            ctx.item.error = "redone"

    changing = TypeRegistry()
    changing.register_type(dataclasses.replace(chain, event_handler=handler))
    config = make_config(store.url)
    changed, untouched = (submit(store.sessions, changing, config).item.id for _ in range(2))  # type: ignore[union-attr]
    with store.sessions.begin() as session:
        for item_id in (changed, untouched):
            set_dimension(session, session.get(WorkItem, item_id), "needs_step3", False)
        store_event(session, changed, "redo", {})
        store_event(session, untouched, "nothing", {})
    before = {item_id: load(store.sessions, item_id) for item_id in (changed, untouched)}

    ProcessingManager(store.sessions, changing, config).run_once(
        projects=set(), event_items={changed, untouched}
    )

    after = {item_id: load(store.sessions, item_id) for item_id in (changed, untouched)}
    assert after[changed].stamp != before[changed].stamp
    assert after[changed].error == "redone"
    assert after[changed].updated_at > before[changed].updated_at
    assert [(d, s) for d, s, _ in dimensions(store, changed)] == [
        ("needs_step3", "true"),
        ("seen", "true"),
    ]
    assert after[changed].status("needs_step3").detail == {"why": "redo"}  # type: ignore[union-attr]
    assert after[untouched].stamp == before[untouched].stamp
    assert not step3_needed(store, untouched)
    assert pending(store, changed) == pending(store, untouched) == 0


def test_items_an_event_queues_take_their_seqs_in_the_order_of_their_events(
    store: Store,
) -> None:
    registry = chain_registry(Behaviour())
    config = make_config(store.url)
    ids = [submit(store.sessions, registry, config).item.id for _ in range(3)]  # type: ignore[union-attr]
    order = [ids[2], ids[0], ids[1]]
    with store.sessions.begin() as session:
        for item_id in ids:  # idle, as after their last action
            session.execute(update(WorkItem).where(WorkItem.id == item_id).values(admission="idle"))
    for item_id in order:  # one transaction each: the events' ids follow this order
        with store.sessions.begin() as session:
            store_event(session, item_id, "redo", {})

    def drained() -> None:
        with store.sessions.begin() as session:
            drain_events_of(session, ids, registry)

    def takes_seqs(sql: str) -> bool:
        return "nextval" in sql.lower() or "update wq_sequences" in sql.lower()

    assert statements_during(store.engine, drained, takes_seqs) == 1
    queued = [load(store.sessions, item_id) for item_id in order]
    assert [item.admission for item in queued] == ["queued"] * 3
    seqs = [item.seq for item in queued]
    assert seqs == sorted(seqs) and len(set(seqs)) == 3


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_events_stored_in_one_statement_hold_their_intake_locks_and_wake_every_replica(
    store: Store,
) -> None:
    registry = chain_registry(Behaviour())
    config = make_config(store.url)
    ids = sorted(submit(store.sessions, registry, config).item.id for _ in range(2))  # type: ignore[union-attr]
    when = utcnow()
    own, other = Wakeup(), Wakeup()
    listening = Listening(store.engine, other)
    try:
        other.wait(0)  # the listener's resync on start
        intake = store.sessions()
        intake.info[WAKEUP_KEY] = own
        try:
            with intake.begin():
                store_events(intake, {ids[1]: when, ids[0]: None}, "redo", {"n": 1})
                with store.sessions.begin() as session:  # a drain meanwhile waits for it
                    results = drain_events_of(session, ids, registry)
                assert [results[item_id].locked for item_id in ids] == [True, True]
        finally:
            intake.close()
        assert own.wait(0).event_items == set(ids)  # this process's scheduler
        woken: set[uuid.UUID] = set()
        wait_for(
            lambda: woken.update(other.wait(0.2).event_items) or woken == set(ids),
            message="the other replica woken for both items",
        )
    finally:
        listening.stop()
    with store.sessions() as session:
        stored = session.execute(select(PendingEvent).order_by(PendingEvent.id)).scalars().all()
        assert [(e.work_item_id, e.event_type, e.payload) for e in stored] == [
            (ids[0], "redo", {"n": 1}),
            (ids[1], "redo", {"n": 1}),
        ]
        assert stored[0].event_at is None and stored[1].event_at == when
    with store.sessions.begin() as session:
        results = drain_events_of(session, ids, registry)
    assert [results[item_id].applied for item_id in ids] == [1, 1]


def test_a_drain_says_which_items_it_left_admitted(store: Store) -> None:
    # The scheduler claims after applying events only when an item is admitted: events
    # cannot make an item that is not admitted claimable.
    registry = chain_registry(Behaviour())
    ids = with_redo_events(store, registry, make_config(store.url), 2)
    with store.sessions.begin() as session:
        for item_id, admission in zip(ids, ("idle", "admitted"), strict=True):
            session.execute(
                update(WorkItem).where(WorkItem.id == item_id).values(admission=admission)
            )
    with store.sessions.begin() as session:
        results = drain_events_of(session, ids, registry)
    assert [results[item_id].applied for item_id in ids] == [1, 1]
    assert [results[item_id].admitted for item_id in ids] == [False, True]
    assert load(store.sessions, ids[0]).admission == "queued"  # settled: to be admitted


def event_statements(store: Store, work: Callable[[], Any]) -> set[str]:
    """The texts of the statements on `pending_events` that `work()` sent."""
    texts: set[str] = set()

    def note(sql: str) -> bool:
        texts.add(sql)
        return True

    statements_during(store.engine, work, note)
    return {sql for sql in texts if "pending_events" in sql}


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_the_drains_own_statements_read_the_same_whatever_the_number_of_items(
    store: Store,
) -> None:
    # One text per statement lets the driver convert it once and the server keep its
    # plan; an `IN` list would be a new text for every number of items.
    registry = chain_registry(Behaviour())
    config = make_config(store.url)
    texts: dict[int, set[str]] = {}
    for count in (2, 5):
        ids = with_redo_events(store, registry, config, count)

        def drain(ids: list[uuid.UUID] = ids) -> None:
            with store.sessions.begin() as session:
                drain_events_of(session, ids, registry)

        texts[count] = event_statements(store, drain)
        assert all(pending(store, item_id) == 0 for item_id in ids)
    assert len(texts[2]) == 2  # the events' read and their deletion
    assert texts[2] == texts[5]
