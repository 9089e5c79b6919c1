"""Releasing items: an item's admission ends (`idle`, or `done` once terminal).

Whoever lets go of an item - a worker, a batch, the API, the sweep - does it here, and
each release leaves one audit row (`released` when it freed a slot, `dequeued` when it
left the queue) and wakes the dispatchers of its project. A batch's items go in one
UPDATE; a worker's item, known as read, in one statement with its lease fence.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import Table, bindparam, update
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from wq.engine.audit import AuditRecord, audit
from wq.engine.models import ADMITTED, DONE, IDLE, TERMINAL_PHASES, WorkItem
from wq.engine.wakeup import PROJECT_QUEUED, signal

WORK_ITEMS: Table = WorkItem.__table__  # type: ignore[assignment]


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
            .where(WORK_ITEMS.c.id.in_(ids))
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

    `records` (the last action's) are audited ahead of the release when it matched.

    The UPDATE releases the item only while `token` holds its lease and its stamp is
    still the loaded one (nobody changed it since), and locks the row until commit on
    PostgreSQL, as the fence does. It is sent ahead of anything the session has yet
    to flush. The item's loaded state is set as written. False, with nothing written,
    when the lease was lost, the item changed, or there is nothing to release: the
    caller then takes the fence and decides again.
    """
    new_admission = released_admission(item)
    if new_admission is None:
        return False
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


def _audit_release(
    session: Session, item: WorkItem, old: dict[str, Any], actor: str, trigger: dict[str, Any]
) -> None:
    held_slot = old["admission"] == ADMITTED
    audit(
        session,
        AuditRecord(
            "released" if held_slot else "dequeued",
            actor,
            item.id,
            old_state=old,
            new_state=snapshot(item),
            trigger=trigger,
        ),
    )
    if held_slot:
        signal(session, PROJECT_QUEUED, item.project)
