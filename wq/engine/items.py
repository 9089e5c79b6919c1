"""Work-item lifecycle services: intake, queueing, terminal phases, retry, cancel.

Every admission or phase change of an item happens in one of these functions, and
each leaves one audit row, with one exception: `settle` marks an item `idle` without
a row when it held no slot and was not queued (nothing anyone waits for changed).
They take the caller's session and never commit; the daemon's routers and threads
call the same code. Releases are in `wq.engine.releases`.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from wq.engine import store
from wq.engine.audit import AuditRecord, audit
from wq.engine.config import PoolConfig
from wq.engine.metrics import after_commit
from wq.engine.models import (
    ACTIVE,
    ADMITTED,
    CANCELLED,
    DONE,
    FAILED,
    IDLE,
    LANES,
    QUEUED,
    TERMINAL_PHASES,
    WorkItem,
)
from wq.engine.registry import SubmitResult, TypeRegistry
from wq.engine.releases import release_slot, snapshot
from wq.engine.store import inline
from wq.engine.wakeup import ITEMS_ADMITTED, PROJECT_QUEUED, signal


class ItemNotFound(LookupError):
    """No work item has that id."""


class ItemConflict(Exception):
    """The item is not in a state that allows the operation."""


def enqueue(
    session: Session,
    item: WorkItem,
    now: datetime,
    *,
    actor: str,
    trigger: dict[str, Any],
    seq: int | None = None,
) -> None:
    """Put an item in its project's queue with a fresh sequence value (`seq`: one
    taken from the sequence already)."""
    old = snapshot(item) if item.seq is not None or item.admission != QUEUED else None
    item.admission = QUEUED
    item.seq = store.next_seq(session) if seq is None else seq
    item.queued_at = now
    item.admitted_at = None
    item.run_after = None
    audit(
        session,
        AuditRecord(
            "queued", actor, item.id, old_state=old, new_state=snapshot(item), trigger=trigger
        ),
    )
    signal(session, PROJECT_QUEUED, item.project)


def settle(
    session: Session,
    item: WorkItem,
    registry: TypeRegistry,
    now: datetime,
    *,
    actor: str,
    trigger: dict[str, Any],
) -> None:
    """Bring admission in line with the item after a change the worker did not make.

    A terminal item is `done`; an idle (or not yet queued) active item whose decider
    wants to act is queued with a fresh seq, and otherwise marked `idle` (no audit row:
    it held no slot). Queued and admitted items are left alone.
    """
    settle_all(session, [item], registry, now, actor=actor, trigger=trigger)


def settle_all(
    session: Session,
    items: Sequence[WorkItem],
    registry: TypeRegistry,
    now: datetime,
    *,
    actor: str,
    trigger: dict[str, Any],
) -> None:
    """`settle` for several items; those queued take their seqs in their order, from
    one statement."""
    to_queue: list[WorkItem] = []
    for item in items:
        if item.phase in TERMINAL_PHASES:
            release_slot(session, item, actor=actor, trigger=trigger)
        elif item.seq is None or item.admission in (IDLE, DONE):
            # A type this process does not handle is queued for the daemons that do.
            if item.type not in registry or registry.get(item.type).decider(item, now) is not None:
                to_queue.append(item)
            elif item.admission != IDLE:
                item.admission = IDLE
    for item, seq in zip(to_queue, store.next_seqs(session, len(to_queue)), strict=True):
        enqueue(session, item, now, actor=actor, trigger=trigger, seq=seq)


def set_phase(
    session: Session,
    item: WorkItem,
    phase: str,
    *,
    actor: str,
    trigger: dict[str, Any],
    error: str | None = None,
) -> None:
    """Move an item to another phase; a terminal phase releases its slot.

    It does not check that the move is allowed: callers decide that, and a terminal
    item is moved like any other (to reactivate one with its attempts reset, use
    `retry`).
    """
    if item.phase == phase:
        return
    old = snapshot(item)
    item.phase = phase
    if error is not None:
        item.error = error
    audit(
        session,
        AuditRecord(
            "phase_changed",
            actor,
            item.id,
            old_state=old,
            new_state=snapshot(item),
            trigger=trigger,
        ),
    )
    count_phase(session, item.type, phase)
    if phase in TERMINAL_PHASES:
        release_slot(session, item, actor=actor, trigger=trigger)


def count_phase(session: Session, item_type: str, phase: str) -> None:
    """Count an item entering a phase, once the change has committed."""
    after_commit(
        session, lambda metrics: metrics.child(metrics.phase_transitions, item_type, phase).inc()
    )


def _active_with_dedup_key(session: Session, item: WorkItem) -> WorkItem | None:
    """The active item holding this item's dedup key: keys are scoped by type and project."""
    return session.execute(
        select(WorkItem).where(
            WorkItem.type == item.type,
            WorkItem.project == item.project,
            WorkItem.dedup_key == item.dedup_key,
            WorkItem.phase == inline(ACTIVE),
            WorkItem.id != item.id,
        )
    ).scalar_one_or_none()


def _claim_dedup_key(session: Session, item: WorkItem) -> None:
    """Make a retried item active again unless another active item holds its key."""
    with session.no_autoflush:  # the item's own change would meet the index first
        holder = _active_with_dedup_key(session, item)
    if holder is None:
        try:
            with session.begin_nested():
                session.flush()
            return
        except IntegrityError:  # a submission with the key committed meanwhile
            with session.no_autoflush:
                holder = _active_with_dedup_key(session, item)
    raise ItemConflict(
        f"work item {item.id} cannot be retried: active item "
        f"{holder.id if holder else '(another)'} holds its dedup key"
    )


def queued_autonomous(session: Session, project: str) -> int:
    """How many autonomous items of the project wait in its queue."""
    return int(
        session.execute(
            select(func.count())
            .select_from(WorkItem)
            .where(
                WorkItem.project == project,
                WorkItem.admission == inline(QUEUED),
                WorkItem.autonomous.is_(True),
            )
        ).scalar_one()
    )


def submit(
    session: Session,
    item: WorkItem,
    *,
    registry: TypeRegistry,
    pool: PoolConfig,
    now: datetime,
    actor: str,
    trigger: dict[str, Any],
) -> SubmitResult:
    """Take a new item in: dedup on its key, cap autonomous work, then queue it.

    The item's `project`, `lane`, `autonomous` and `dedup_key` must be set. A key that
    matches an active item is a dedup hit even when two intakes race (the partial
    unique index decides, and the loser re-reads the winner).
    """
    if item.lane not in LANES:
        raise ValueError(f"lane must be one of {', '.join(LANES)}")
    if item.dedup_key:
        existing = _active_with_dedup_key(session, item)
        if existing is not None:
            return SubmitResult("dedup", existing)
    if item.autonomous:
        # Count under the project's lock so concurrent producers cannot overshoot K.
        store.lock_project(session, item.project)
        if queued_autonomous(session, item.project) >= pool.queued_autonomous_cap:
            return SubmitResult("capped", None)
    item.id = item.id or uuid.uuid4()
    item.phase = ACTIVE
    item.created_at = item.updated_at = now
    # Decide before the insert, so a new item is written once, already queued.
    wants_action = item.type not in registry or registry.get(item.type).decider(item, now)
    item.admission = QUEUED if wants_action else IDLE
    if wants_action:
        item.seq = store.next_seq(session)
        item.queued_at = now
    if item.dedup_key:
        try:
            with session.begin_nested():
                session.add(item)
                session.flush()
        except IntegrityError:
            existing = _active_with_dedup_key(session, item)
            if existing is None:
                raise
            return SubmitResult("dedup", existing)
    else:
        session.add(item)
        session.flush()  # the row exists once submit returns, like after any intake
    records = [
        AuditRecord(
            "created",
            actor,
            item.id,
            new_state=snapshot(item),
            trigger=trigger,
            metadata={"type": item.type, "autonomous": item.autonomous or None},
        )
    ]
    if wants_action:
        records.append(
            AuditRecord("queued", actor, item.id, new_state=snapshot(item), trigger=trigger)
        )
        signal(session, PROJECT_QUEUED, item.project)
    audit(session, *records)
    return SubmitResult("created", item)


def retry(
    session: Session,
    item_id: uuid.UUID,
    *,
    registry: TypeRegistry,
    now: datetime,
    actor: str,
) -> WorkItem:
    """Bring a failed or cancelled item back to `active` with its attempts reset."""
    item = session.get(WorkItem, item_id, with_for_update=True, populate_existing=True)
    if item is None:
        raise ItemNotFound(str(item_id))
    if item.phase not in (FAILED, CANCELLED):
        raise ItemConflict(
            f"work item {item_id} is {item.phase}; only failed or cancelled items can be retried"
        )
    veto = registry.get(item.type).retry_veto if item.type in registry else None
    reason = veto(session, item) if veto is not None else None
    if reason:
        raise ItemConflict(f"work item {item_id} cannot be retried: {reason}")
    old = snapshot(item)
    item.phase = ACTIVE
    item.attempts = 0
    item.error = None
    item.run_after = None
    item.admission = IDLE
    if item.dedup_key:
        _claim_dedup_key(session, item)
    trigger = {"source": "api", "action": "retry"}
    count_phase(session, item.type, ACTIVE)
    audit(
        session,
        AuditRecord(
            "retried", actor, item.id, old_state=old, new_state=snapshot(item), trigger=trigger
        ),
    )
    settle(session, item, registry, now, actor=actor, trigger=trigger)
    return item


def cancel(
    session: Session,
    item_id: uuid.UUID,
    *,
    registry: TypeRegistry,
    now: datetime,
    actor: str,
) -> tuple[str, WorkItem]:
    """Cancel an active item: at once, or by asking its type to stop what it runs.

    Returns ("cancelled", item), or ("requested", item) when an admitted item's type
    stops external work first and its worker ends the item (soon: it is due now).
    """
    item = session.get(WorkItem, item_id, with_for_update=True, populate_existing=True)
    if item is None:
        raise ItemNotFound(str(item_id))
    if item.phase in TERMINAL_PHASES:
        raise ItemConflict(f"work item {item_id} is already {item.phase}")
    trigger = {"source": "api", "action": "cancel"}
    hook = registry.get(item.type).cancel_requested if item.type in registry else None
    if hook is not None and item.admission == ADMITTED and hook(session, item, now):
        if not session.is_modified(item):
            # Asked before and not done yet: its worker is on it, nothing changes.
            return "requested", item
        item.run_after = now
        audit(
            session,
            AuditRecord(
                "cancel_requested",
                actor,
                item.id,
                old_state=snapshot(item),
                new_state=snapshot(item),
                trigger=trigger,
            ),
        )
        signal(session, ITEMS_ADMITTED)
        return "requested", item
    set_phase(session, item, CANCELLED, actor=actor, trigger=trigger)
    return "cancelled", item
