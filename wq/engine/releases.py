"""Releasing items: an item's admission ends (`idle`, or `done` once terminal).

Whoever lets go of an item - a worker, a batch, the API, the sweep - does it here, and
each release leaves one audit row (`released` when it freed a slot, `dequeued` when it
left the queue) and wakes the dispatchers of its project. A batch's items go in one
UPDATE; a worker's item, known as read, in one statement with its lease fence
(`release_if_unchanged`).

On PostgreSQL that one statement (`wq.engine.release_statements`) also writes the
audit rows of the last action and of the release and sends the `NOTIFY` that wakes the
project's dispatchers on every replica, all only if the release matched. So the
worker's transaction is `BEGIN`, the action's own writes, this statement and `COMMIT`.
On SQLite (no round trips to save) the audit rows and signals are deferred to the
commit as usual. Rows and signals the statement wrote are still logged, archived and
delivered to this process's wake-up hub once the transaction commits, like every other.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import Table, bindparam, update
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from wq.engine import audit as audit_module
from wq.engine import on_commit
from wq.engine import wakeup as wakeup_module
from wq.engine.audit import AuditRecord, audit
from wq.engine.models import ADMITTED, DONE, IDLE, TERMINAL_PHASES, WorkItem
from wq.engine.release_statements import FencedRelease, release_fenced
from wq.engine.store import among, is_postgres
from wq.engine.wakeup import PROJECT_QUEUED, signal

WORK_ITEMS: Table = WorkItem.__table__  # type: ignore[assignment]

# Deferred values of what the PostgreSQL release statement already wrote: after the
# commit they are logged (and the archiver woken) and delivered to the local hub, like
# "audit" and "signal" entries, but nothing is written for them before it.
AUDIT_WRITTEN = "audit_written"
SIGNAL_SENT = "signal_sent"
on_commit.handler(AUDIT_WRITTEN)(audit_module.log_committed)
on_commit.handler(SIGNAL_SENT)(wakeup_module.deliver_committed)


def snapshot(item: WorkItem) -> dict[str, Any]:
    """The audited view of an item's state."""
    return {
        "phase": item.phase,
        "admission": item.admission,
        "lane": item.lane,
        "seq": item.seq,
        "project": item.project,
    }


def release_slot(session: Session, item: WorkItem, *, actor: str, trigger: dict[str, Any]) -> None:
    """End an item's admission: `idle` while active, `done` once terminal.

    Frees its slot (if it held one) and wakes the dispatcher of its project.
    """
    new_admission = released_admission(item)
    if new_admission is None:
        return
    old = snapshot(item)
    item.admission = new_admission
    item.lease_owner = item.lease_token = None
    item.leased_until = None
    _audit_release(session, item, old, actor, trigger)


class Release(NamedTuple):
    """An item a batch lets go of, and why."""

    item: WorkItem
    trigger: dict[str, Any]


def release_slots(
    session: Session, releases: Sequence[Release], *, actor: str, now: datetime
) -> None:
    """`release_slot` for a batch of items: one UPDATE per new admission state.

    The items' loaded state is set as written (the ORM has nothing left to flush for
    these columns); the caller holds their lease fence in the open transaction.
    """
    released: dict[str, list[uuid.UUID]] = {}
    for item, trigger in releases:
        new_admission = released_admission(item)
        if new_admission is None:
            continue
        _written_release(session, item, new_admission, now, actor, trigger)
        released.setdefault(new_admission, []).append(item.id)
    for new_admission, ids in released.items():
        session.execute(
            update(WORK_ITEMS)
            .where(among(session, WORK_ITEMS.c.id, ids))
            .values(
                admission=new_admission,
                lease_owner=None,
                lease_token=None,
                leased_until=None,
                updated_at=now,
            )
        )


RELEASE_IF_UNCHANGED = (
    update(WORK_ITEMS)
    .where(
        WORK_ITEMS.c.id == bindparam("item_id"),
        WORK_ITEMS.c.lease_token == bindparam("token"),
        WORK_ITEMS.c.stamp == bindparam("read_stamp"),
    )
    .values(
        admission=bindparam("new_admission"),
        lease_owner=None,
        lease_token=None,
        leased_until=None,
        updated_at=bindparam("now"),
    )
)


def release_if_unchanged(
    session: Session,
    item: WorkItem,
    *,
    token: str,
    actor: str,
    trigger: dict[str, Any],
    now: datetime,
    records: Sequence[AuditRecord] = (),
) -> bool:
    """`release_slot` and its lease fence in one statement, for an item known as read.

    `records` (the last action's audit rows) are audited ahead of the release's own,
    and only if the release matched. The statement releases the item only while
    `token` holds its lease and its stamp is still the loaded one (nobody changed it
    since), and locks the row until commit, as the fence does. It is sent ahead of
    anything the session has yet to flush. The item's loaded state is set as written.
    False, with nothing written and `records` left to the caller, when the lease was
    lost, the item changed, or there is nothing to release: the caller then takes the
    fence and decides again. The caller commits.
    """
    new_admission = released_admission(item)
    if new_admission is None:
        return False
    if is_postgres(session):
        return _release_with_audit_and_notify(
            session,
            item,
            new_admission,
            token=token,
            actor=actor,
            trigger=trigger,
            now=now,
            records=records,
        )
    # SQLite: one writer and no round trips to save; the rows go out with the commit.
    result = session.connection().execute(  # the connection: no autoflush before it
        RELEASE_IF_UNCHANGED,
        {
            "item_id": item.id,
            "token": token,
            "read_stamp": item.stamp,
            "new_admission": new_admission,
            "now": now,
        },
    )
    if result.rowcount != 1:
        return False
    audit(session, *records)
    _written_release(session, item, new_admission, now, actor, trigger)
    return True


def _release_with_audit_and_notify(
    session: Session,
    item: WorkItem,
    new_admission: str,
    *,
    token: str,
    actor: str,
    trigger: dict[str, Any],
    now: datetime,
    records: Sequence[AuditRecord],
) -> bool:
    """PostgreSQL's `release_if_unchanged`: the audit rows and the NOTIFY go with it.

    So do the audit rows and signals the transaction deferred so far (the action's),
    ahead of the rest; when the release does not match they are deferred again.
    """
    old = snapshot(item)
    held_slot = old["admission"] == ADMITTED
    released = release_record(old, item.id, new_admission, actor, trigger)
    # What the action deferred (its own audit rows, its signals) goes out with this
    # statement too, ahead of the rest: nothing is left to write at the commit.
    earlier_rows = on_commit.take(session, "audit")
    earlier_signals = on_commit.take(session, "signal")
    rows = [*earlier_rows, *(record.row() for record in (*records, released))]
    signals = list(earlier_signals)
    if held_slot and (PROJECT_QUEUED, item.project) not in signals:
        signals.append((PROJECT_QUEUED, item.project))
    fenced = FencedRelease(item.id, token, item.stamp, new_admission, rows, signals)
    if item.id not in release_fenced(session, [fenced], now=now):
        for row in earlier_rows:  # back where they were: written at the commit
            on_commit.defer(session, "audit", row)
        for kind_subject in earlier_signals:
            on_commit.defer(session, "signal", kind_subject)
        return False
    mark_released(item, new_admission, now)
    for row in rows:
        on_commit.defer(session, AUDIT_WRITTEN, row)
    for kind_subject in signals:
        on_commit.defer(session, SIGNAL_SENT, kind_subject)
    return True


def _written_release(
    session: Session,
    item: WorkItem,
    new_admission: str,
    now: datetime,
    actor: str,
    trigger: dict[str, Any],
) -> None:
    """A release a statement wrote: the loaded item set to match, and audited."""
    old = snapshot(item)
    mark_released(item, new_admission, now)
    _audit_release(session, item, old, actor, trigger)


def mark_released(item: WorkItem, new_admission: str, now: datetime) -> None:
    """Set the loaded item as a release statement wrote it (nothing left to flush)."""
    for key, value in (
        ("admission", new_admission),
        ("lease_owner", None),
        ("lease_token", None),
        ("leased_until", None),
        ("updated_at", now),
    ):
        set_committed_value(item, key, value)


def released_admission(item: WorkItem) -> str | None:
    """The admission state releasing the item leads to; None when it is there already."""
    new_admission = DONE if item.phase in TERMINAL_PHASES else IDLE
    return None if item.admission == new_admission else new_admission


def release_record(
    old: dict[str, Any],
    item_id: uuid.UUID,
    new_admission: str,
    actor: str,
    trigger: dict[str, Any],
) -> AuditRecord:
    """The audit row of a release from `old` (a `snapshot`): `released` when it freed a
    slot, `dequeued` when the item only left the queue."""
    return AuditRecord(
        "released" if old["admission"] == ADMITTED else "dequeued",
        actor,
        item_id,
        old_state=old,
        new_state={**old, "admission": new_admission},
        trigger=trigger,
    )


def _audit_release(
    session: Session, item: WorkItem, old: dict[str, Any], actor: str, trigger: dict[str, Any]
) -> None:
    held_slot = old["admission"] == ADMITTED
    audit(session, release_record(old, item.id, item.admission, actor, trigger))
    if held_slot:
        signal(session, PROJECT_QUEUED, item.project)
