"""A worker lets go of an item it knows as read: fence, release, audit and NOTIFY at once.

When the decider has nothing more to do with an item nobody changed since the worker
read it, one statement checks the lease token and the item's stamp, releases the item
(`idle`, or `done` once terminal), which locks its row until commit, and - on
PostgreSQL - also writes the audit rows of the last action and of the release and
sends the `NOTIFY` that wakes the project's dispatchers on every replica, all only if
the release matched. So the worker's transaction is `BEGIN`, the action's own writes,
this statement and `COMMIT`. On SQLite (no round trips to save) it is
`wq.engine.releases.release_if_unchanged`, the audit rows deferred as usual.

Rows and signals written here are still logged, archived and delivered to this
process's wake-up hub once the transaction commits, like every other.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Integer, text
from sqlalchemy.orm import Session

from wq.engine import audit as audit_module
from wq.engine import on_commit
from wq.engine import wakeup as wakeup_module
from wq.engine.audit import AuditRecord
from wq.engine.models import ADMITTED, WorkItem
from wq.engine.releases import (
    mark_released,
    release_if_unchanged,
    released_admission,
    snapshot,
)
from wq.engine.store import NOTIFY_CHANNEL
from wq.engine.wakeup import NO_HUB, PROJECT_QUEUED, WAKEUP_KEY, Wakeup

# Deferred values of what this statement already wrote: after the commit they are
# logged (and the archiver woken) and delivered to the local hub, like "audit" and
# "signal" entries, but nothing is written for them before it.
_AUDIT_WRITTEN = "audit_written"
_SIGNAL_SENT = "signal_sent"
on_commit.handler(_AUDIT_WRITTEN)(audit_module.log_committed)
on_commit.handler(_SIGNAL_SENT)(wakeup_module.deliver_committed)

_RELEASE_PG = text(
    """
WITH released AS (
    UPDATE work_items
    SET admission = :new_admission, lease_owner = NULL, lease_token = NULL,
        leased_until = NULL, updated_at = :now
    WHERE id = :item_id AND lease_token = :token AND stamp = :read_stamp
    RETURNING id
), audited AS (
    INSERT INTO audit_log (at, event_type, work_item_id, actor, old_state, new_state,
        "trigger", metadata)
    SELECT a.at, a.event_type, a.work_item_id, a.actor, CAST(a.old_state AS jsonb),
        CAST(a.new_state AS jsonb), CAST(a.cause AS jsonb), CAST(a.extra AS jsonb)
    FROM unnest(
        CAST(:ats AS timestamptz[]), CAST(:event_types AS text[]),
        CAST(:item_ids AS uuid[]), CAST(:actors AS text[]), CAST(:old_states AS text[]),
        CAST(:new_states AS text[]), CAST(:triggers AS text[]), CAST(:extras AS text[])
    ) AS a(at, event_type, work_item_id, actor, old_state, new_state, cause, extra)
    WHERE EXISTS (SELECT FROM released)
)
SELECT (SELECT count(*) FROM released) AS released,
    (SELECT count(pg_notify(:channel, p))
     FROM released, unnest(CAST(:payloads AS text[])) AS p) AS notified
"""
).columns(released=Integer(), notified=Integer())


def release_unchanged(
    session: Session,
    item: WorkItem,
    *,
    token: str,
    actor: str,
    trigger: dict[str, Any],
    now: datetime,
    records: Sequence[AuditRecord] = (),
) -> bool:
    """Release an item nobody changed since it was read, under its lease, with `records`.

    `records` (the last action's audit rows) are written ahead of the release's own,
    and only if the release matched; on PostgreSQL so are the audit rows and signals
    the transaction deferred so far (the action's), ahead of them. False, with
    nothing written and `records` left to the caller, when the lease was lost, the
    item changed, or there is nothing to release: the caller then takes the fence
    and decides again. The item's loaded state is set as written. The caller commits.
    """
    if session.get_bind().dialect.name != "postgresql":
        # SQLite: one writer and no round trips to save; the rows go out with the commit.
        return release_if_unchanged(
            session, item, token=token, actor=actor, trigger=trigger, now=now, records=records
        )
    new_admission = released_admission(item)
    if new_admission is None:
        return False
    old = snapshot(item)
    held_slot = old["admission"] == ADMITTED
    released = AuditRecord(
        "released" if held_slot else "dequeued",
        actor,
        item.id,
        old_state=old,
        new_state={**old, "admission": new_admission},
        trigger=trigger,
    )
    # What the action deferred (its own audit rows, its signals) goes out with this
    # statement too, ahead of the rest: nothing is left to write at the commit.
    earlier_rows = on_commit.take(session, "audit")
    earlier_signals = on_commit.take(session, "signal")
    rows = [*earlier_rows, *(record.row() for record in (*records, released))]
    signals = list(earlier_signals)
    if held_slot and (PROJECT_QUEUED, item.project) not in signals:
        signals.append((PROJECT_QUEUED, item.project))
    hub = session.info.get(WAKEUP_KEY)
    origin = hub.origin if isinstance(hub, Wakeup) else NO_HUB
    document = audit_module.json_column_text
    clean = audit_module.without_nul
    answer = (
        session.connection()  # the connection: no autoflush before it
        .execute(
            _RELEASE_PG,
            {
                "new_admission": new_admission,
                "now": now,
                "item_id": item.id,
                "token": token,
                "read_stamp": item.stamp,
                "ats": [row["at"] for row in rows],
                "event_types": [clean(row["event_type"]) for row in rows],
                "item_ids": [row["work_item_id"] for row in rows],
                "actors": [clean(row["actor"]) for row in rows],
                "old_states": [document(row["old_state"]) for row in rows],
                "new_states": [document(row["new_state"]) for row in rows],
                "triggers": [document(row["trigger"]) for row in rows],
                "extras": [document(row["metadata"]) for row in rows],
                "channel": NOTIFY_CHANNEL,
                "payloads": [f"{origin}|{kind}:{subject}" for kind, subject in signals],
            },
        )
        .one()
    )
    if answer.released != 1:
        for row in earlier_rows:  # back where they were: written at the commit
            on_commit.defer(session, "audit", row)
        for kind_subject in earlier_signals:
            on_commit.defer(session, "signal", kind_subject)
        return False
    mark_released(item, new_admission, now)
    for row in rows:
        on_commit.defer(session, _AUDIT_WRITTEN, row)
    for kind_subject in signals:
        on_commit.defer(session, _SIGNAL_SENT, kind_subject)
    return True
