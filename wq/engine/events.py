"""Events for work items: stored in `pending_events`, then applied in order.

Intake (a webhook, a queue consumer, a test) stores an event and signals; the
scheduler drains it right away, whatever the item's admission state, so views are
never stale. Applying an event runs the type's handler under a per-item lock; events
for terminal items are discarded. An item another transaction has locked is skipped,
not waited for (the scheduler's one thread would wait with it, and every other item's
events behind it): its events stay stored for the next drain.

Ordering: an event's time (from the type's resolver) is checked at intake against the
clock plus a skew, so one bogus far-future timestamp cannot freeze an item. The
engine's guard on `last_event_at` orders the event kinds a type lists in
`ordered_events` (all kinds with a time when it lists none); a type orders its other
streams itself (pipelines by id, jobs by build id) and raises `StaleEvent` for an event
that its state already supersedes.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session, joinedload, sessionmaker

from wq.engine import jsontext, on_commit, store
from wq.engine.envelope import NUL_REPLACEMENT, Event, contains_nul
from wq.engine.event_inserts import insert_events
from wq.engine.group_writes import GroupWrites
from wq.engine.item_loading import item_entity
from wq.engine.items import settle_all
from wq.engine.metrics import Metrics, after_commit, metrics_of
from wq.engine.models import ADMITTED, TERMINAL_PHASES, PendingEvent, WorkItem, utcnow
from wq.engine.models.base import without_nul
from wq.engine.registry import EventContext, EventQuery, ItemType, TypeRegistry
from wq.engine.releases import SIGNAL_SENT
from wq.engine.wakeup import EVENT_STORED, NO_HUB, WAKEUP_KEY, Wakeup, signal

log = logging.getLogger(__name__)
DEFAULT_MAX_FUTURE_SKEW = timedelta(minutes=5)


class StaleEvent(Exception):
    """Raised by a handler: the item already reflects something newer; discard the event."""


class HandlerRaised(Exception):
    """A handler raised while events were applied without savepoints: the transaction
    must be rolled back and the events applied again, each in a savepoint."""


@dataclass
class DrainResult:
    """How the events of one item were dealt with."""

    applied: int = 0
    discarded: int = 0
    failed: int = 0  # of the discarded: their handler raised
    # The item was locked by another transaction: nothing was done, its events wait.
    locked: bool = False
    # Admitted once its events were applied: they may have made it claimable.
    admitted: bool = False

    def count(self, metrics: Metrics) -> None:
        """Count this drain's outcomes (once its transaction has committed)."""
        metrics.count_applications("applied", self.applied)
        metrics.count_applications("discarded", self.discarded - self.failed)
        metrics.count_applications("failed", self.failed)


def store_event(
    session: Session,
    item_id: uuid.UUID,
    event_type: str,
    payload: Any,
    *,
    event_at: datetime | None = None,
) -> None:
    """Store one event for an item and wake the scheduler once it commits."""
    store.lock_item(session, item_id)
    session.add(
        PendingEvent(
            work_item_id=item_id, event_type=event_type, payload=payload, event_at=event_at
        )
    )
    signal(session, EVENT_STORED, str(item_id))


def store_events(
    session: Session,
    targets: dict[uuid.UUID, datetime | None],
    event_type: str,
    payload: Any,
) -> None:
    """`store_event` for each of these items (item id -> the event's time there), their
    intake locks taken in id order; on PostgreSQL in one statement with its NOTIFYs."""
    ordered = sorted(targets)
    if not ordered:
        return
    if not store.is_postgres(session):
        for item_id in ordered:
            store_event(session, item_id, event_type, payload, event_at=targets[item_id])
        return
    hub = session.info.get(WAKEUP_KEY)
    origin = hub.origin if isinstance(hub, Wakeup) else NO_HUB
    insert_events(
        session,
        [(item_id, targets[item_id]) for item_id in ordered],
        event_type,
        jsontext.dumps(payload),
        now=utcnow(),
        origin=origin,
    )
    for item_id in ordered:  # this process's scheduler, once it commits
        on_commit.defer(session, SIGNAL_SENT, (EVENT_STORED, str(item_id)))


@dataclass
class AppliedEvents:
    """What `apply_stored_events` did: whether an item may have become claimable, and
    the items another transaction held (their events wait for a later try)."""

    claimable: bool = False
    locked: set[uuid.UUID] = field(default_factory=set)


def apply_stored_events(
    sessions: sessionmaker[Session],
    item_ids: Sequence[uuid.UUID],
    registry: TypeRegistry,
    *,
    savepoints: bool = False,
) -> AppliedEvents:
    """Apply the stored events of these items in one transaction: first without a
    savepoint per event (their writes flushed together), again with them should a
    handler raise, and item by item should the transaction fail, so that one item's
    failure holds up no other's. `claimable`: an item is admitted (or, after a
    failure, may be)."""
    try:
        with sessions.begin() as session:
            results = drain_events_of(session, item_ids, registry, savepoints=savepoints)
    except HandlerRaised:
        return apply_stored_events(sessions, item_ids, registry, savepoints=True)
    except Exception:
        if len(item_ids) == 1 and savepoints:  # the sweep tries again; others go on
            log.exception("applying the events of work item %s failed", item_ids[0])
            return AppliedEvents(claimable=True)
        applied = AppliedEvents()
        for item_id in item_ids:
            alone = apply_stored_events(sessions, [item_id], registry, savepoints=True)
            applied.claimable |= alone.claimable
            applied.locked |= alone.locked
        return applied
    return AppliedEvents(
        claimable=any(result.admitted for result in results.values()),
        locked={item_id for item_id, result in results.items() if result.locked},
    )


def drain_events(
    session: Session, item_id: uuid.UUID, registry: TypeRegistry, *, actor: str = "system"
) -> DrainResult:
    """Apply an item's pending events in arrival order (caller commits).

    If another transaction holds the item (its row, or its intake lock), nothing is
    done and `locked` is set: the caller drains it again later.
    """
    return drain_events_of(session, [item_id], registry, actor=actor)[item_id]


def drain_events_of(
    session: Session,
    item_ids: Sequence[uuid.UUID],
    registry: TypeRegistry,
    *,
    actor: str = "system",
    savepoints: bool = True,
) -> dict[uuid.UUID, DrainResult]:
    """`drain_events` for several items in one transaction (caller commits).

    The items' intake locks, their events and their rows are each taken by one
    statement for all of them, and their events deleted by one: an event's own work
    is its handler's, in a savepoint. Items another transaction holds are `locked`.

    `savepoints=False`: the handlers run without them, their writes flushed together;
    should one raise (a `StaleEvent` too), `HandlerRaised` is raised and the caller
    rolls back and applies the events again with savepoints.
    """
    results = {item_id: DrainResult() for item_id in item_ids}
    free = store.try_lock_items(session, item_ids)
    for item_id in set(item_ids) - free:
        results[item_id].locked = True
    events: dict[uuid.UUID, list[PendingEvent]] = {}
    if free:
        for pending in session.execute(
            select(PendingEvent)
            .where(store.among(session, PendingEvent.work_item_id, free))
            .order_by(PendingEvent.id)
        ).scalars():
            events.setdefault(pending.work_item_id, []).append(pending)
    if not events:
        return results
    # The items with their details and dimensions in one statement (joined), as a
    # claim loads them: a `selectin` load of each was two more, and most of the ORM's
    # cost of loading them.
    entity = item_entity(registry)
    items = {
        item.id: item
        for item in session.execute(
            select(entity)
            .where(store.among(session, entity.id, events))
            .options(joinedload(entity.statuses))
            .with_for_update(skip_locked=True, of=WorkItem)
            .execution_options(populate_existing=True)
        )
        .unique()
        .scalars()
    }
    applied: list[int] = []
    now = utcnow()
    for item_id, item_events in events.items():
        item = items.get(item_id)
        if item is None:
            # Locked (or gone, and its events with it): SKIP LOCKED cannot tell, nor need it.
            results[item_id].locked = True
            continue
        _apply(session, item, item_events, registry, now, results[item_id], savepoints)
        applied.extend(event.id for event in item_events)
    settle_all(  # in the order of their first events: their seqs follow it
        session,
        [items[item_id] for item_id in events if item_id in items],
        registry,
        now,
        actor=actor,
        trigger={"source": "event", "reason": "events applied"},
    )
    if store.is_postgres(session):
        _write_plainly(session, items.values())
    if applied:
        # Not matched against the session's objects: the transaction ends here.
        session.execute(
            delete(PendingEvent)
            .where(store.among(session, PendingEvent.id, applied))
            .execution_options(synchronize_session=False)
        )
    for item_id, item in items.items():
        results[item_id].admitted = item.admission == ADMITTED
        after_commit(session, results[item_id].count)
    return results


def _write_plainly(session: Session, items: Iterable[WorkItem]) -> None:
    """Write what the events changed on `items` by plain statements, not the session's
    flush (`wq.engine.group_writes`), and take them out of the session; an item whose
    changes are not plain stays for the flush."""
    writes = GroupWrites()
    written = [item for item in items if writes.add(item, stamp=True)]
    writes.write(session.connection())
    for item in written:
        session.expunge(item)


def _apply(
    session: Session,
    item: WorkItem,
    events: list[PendingEvent],
    registry: TypeRegistry,
    now: datetime,
    result: DrainResult,
    savepoints: bool,
) -> None:
    """Apply one locked item's events in order, each in a savepoint; count them."""
    item_type = registry.get(item.type) if item.type in registry else None
    handler = item_type.event_handler if item_type is not None else None
    ordered = item_type.ordered_events if item_type is not None else None
    for pending in events:
        clock = pending.event_at if ordered is None or pending.event_type in ordered else None
        stale = clock is not None and item.last_event_at is not None and clock < item.last_event_at
        if item.phase in TERMINAL_PHASES or stale or handler is None:
            result.discarded += 1
            log.info(
                "discarded event %s for item %s (%s)",
                pending.event_type,
                item.id,
                "terminal item"
                if item.phase in TERMINAL_PHASES
                else "older than the last event"
                if stale
                else "no handler",
            )
            continue
        context = EventContext(
            session, item, pending.event_type, pending.payload, pending.event_at, now
        )
        if not savepoints:
            try:
                handler(context)
            except Exception as err:  # what it wrote cannot be told apart: start again
                raise HandlerRaised(str(item.id)) from err
            if clock is not None:
                item.last_event_at = clock
            result.applied += 1
            continue
        try:
            with session.begin_nested():  # a handler that fails leaves nothing behind
                handler(context)
        except StaleEvent as verdict:
            log.info("discarded event %s for item %s (%s)", pending.event_type, item.id, verdict)
            result.discarded += 1
            continue
        except Exception:
            # One bad event must not block the item's other events, nor the scheduler.
            log.exception(
                "event %s %s for item %s failed; discarded", pending.id, pending.event_type, item.id
            )
            result.failed += 1
            result.discarded += 1
            continue
        if clock is not None:
            item.last_event_at = clock
        result.applied += 1


def ingest(
    sessions: sessionmaker[Session],
    registry: TypeRegistry,
    event: Event,
    *,
    source: str,
    max_future_skew: timedelta = DEFAULT_MAX_FUTURE_SKEW,
) -> int:
    """Store an event for every item it concerns, in one transaction; return how many.

    Every handled type's resolver is asked, with the payload as received (an identifier
    holding NUL matches nothing). What is stored has NUL in its text replaced, as the
    database cannot hold it. An event whose time lies further ahead than
    `max_future_skew` is counted `future` and stored nowhere. The caller acknowledges
    the event (deletes the queue message, answers the webhook) only after this returns.
    `source` (sqs, webhook) labels the counts.
    """
    metrics = metrics_of(sessions)
    metrics.count_event(source, "received")
    latest = utcnow() + max_future_skew
    with sessions.begin() as session:
        targets: dict[uuid.UUID, datetime | None] = {}
        for name in registry.names:
            handled = registry.get(name)
            resolver = handled.event_resolver
            if resolver is None or not resolves(handled, event.event_type):
                continue
            ids, event_at = resolver(session, event.event_type, event.payload)
            if ids and too_far_ahead(metrics, source, event.event_type, event_at, latest):
                return 0
            targets.update(dict.fromkeys(ids, event_at))
        store_events(session, targets, event.event_type, storable(event.payload))
    metrics.count_event(source, "stored" if targets else "unmatched")
    return len(targets)


def storable(payload: Any) -> Any:
    """The payload with NUL in its text replaced (the database cannot hold it)."""
    return without_nul(payload, NUL_REPLACEMENT) if contains_nul(payload) else payload


def too_far_ahead(
    metrics: Metrics, source: str, event_type: str, event_at: datetime | None, latest: datetime
) -> bool:
    """Whether an event dated `event_at` lies beyond `latest` (then counted and logged:
    it is stored nowhere)."""
    if event_at is None or event_at <= latest:
        return False
    metrics.count_event(source, "future")
    log.warning(
        "event %s dated %s is further ahead than the allowed skew; ignored",
        event_type,
        event_at.isoformat(),
    )
    return True


def event_queries(registry: TypeRegistry, kind: str) -> list[EventQuery] | None:
    """The lookups of every type that resolves events of `kind`, or None when one of
    them can resolve only in a session (it may write: the task type's issue rules
    submit)."""
    queries = []
    for name in registry.names:
        handled = registry.get(name)
        if handled.event_resolver is None or not resolves(handled, kind):
            continue
        if handled.event_query is None:
            return None
        queries.append(handled.event_query)
    return queries


def resolves(handled: ItemType, kind: str) -> bool:
    """Whether a type's resolver looks at events of `kind`."""
    return handled.event_kinds is None or kind in handled.event_kinds


def items_with_pending_events(session: Session, limit: int = 1000) -> list[uuid.UUID]:
    """Items that still have stored events (start-up recovery, the sweep's safety net)."""
    rows = session.execute(select(PendingEvent.work_item_id).distinct().limit(limit)).scalars()
    return list(rows)
