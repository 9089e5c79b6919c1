"""Leases: the statements that lease admitted items to workers and batches.

The dialect seam's other half (`wq.engine.store` holds the admission side): the
claim (one statement on PostgreSQL, `FOR UPDATE SKIP LOCKED`; a read then an UPDATE
inside SQLite's `BEGIN IMMEDIATE` lock), the row locks a batch holds instead of a
lease, when the next admitted item comes due, and letting go of a lease (fences: `wq.engine.fence`).
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, NamedTuple, TypeVar

from sqlalchemy import String, Uuid, case, func, or_, select, text, update
from sqlalchemy.orm import Session
from sqlalchemy.sql import Select

from wq.engine.models import ACTIVE, ADMITTED, UtcDateTime, WorkItem
from wq.engine.store import inline, is_postgres
from wq.engine.wakeup import ITEMS_ADMITTED, signal

_Query = TypeVar("_Query", bound="Select[*tuple[Any, ...]]")


class Claim(NamedTuple):
    """One item leased by a claim; `previous_*` are set when an expired lease was taken over.

    `item` is the item as leased, loaded by the claim's transaction and detached from
    its session (`wq.engine.claims`), when the claim loaded it; else None.
    """

    id: uuid.UUID
    token: str
    previous_owner: str | None
    previous_until: datetime | None
    item_type: str = ""
    item: WorkItem | None = None


def new_token() -> str:
    """A fresh lease token.

    Tokens tell claims apart (the fence compares them) and never leave the engine, so
    they need to be unique, not secret: they come from the process's own generator.
    `uuid4` would read the system's (a system call, which lets go of the interpreter's
    lock), and the scheduler, which makes one for each claim the workers wait for,
    would then wait for its turn behind every busy worker to go on.
    """
    return str(uuid.UUID(int=random.getrandbits(128), version=4))


# PostgreSQL's claim. The candidates come from ix_work_items_claimable in its order
# (ready since, then seq), so it reads about what it takes however many items are
# admitted; the rows are then updated by primary key (`= ANY(ARRAY(...))`: with the
# join alone, a hash join over the whole table was planned).
CLAIM_PG = text(
    f"""
WITH chosen AS (
    SELECT c.id, c.lease_owner, c.leased_until FROM work_items AS c
    WHERE c.admission = '{ADMITTED}' AND c.phase = '{ACTIVE}'
        AND c.type = ANY(CAST(:types AS text[]))
        AND (c.leased_until IS NULL OR c.leased_until < :now)
        AND (c.run_after IS NULL OR c.run_after <= :now)
    ORDER BY coalesce(c.run_after, c.admitted_at), c.seq
    LIMIT :limit
    FOR UPDATE SKIP LOCKED
)
UPDATE work_items AS w
SET lease_owner = :owner, lease_token = :token, leased_until = :lease_until
FROM chosen
WHERE w.id = chosen.id AND w.id = ANY(ARRAY(SELECT id FROM chosen))
RETURNING w.id, chosen.lease_owner AS previous_owner,
    chosen.leased_until AS previous_until, w.type
"""
).columns(
    id=Uuid(),
    previous_owner=String(),
    previous_until=UtcDateTime(),
    type=String(),
)


def claim(
    session: Session,
    *,
    owner: str,
    limit: int,
    types: Sequence[str],
    now: datetime,
    lease_until: datetime,
    token: str | None = None,
) -> list[Claim]:
    """Lease up to `limit` admitted, active, unleased items.

    Every claim takes a fresh token (or the one given: claims that are processed
    together share one). PostgreSQL skips rows other replicas hold
    (`FOR UPDATE SKIP LOCKED`); SQLite runs inside the `BEGIN IMMEDIATE` lock. An
    item whose lease expired is taken over; its previous owner is returned.
    """
    if limit <= 0 or not types:
        return []
    token = token or new_token()
    if is_postgres(session):
        # One round trip: lock the candidates (skipping rows other replicas hold) and
        # lease them, returning the previous lease for the takeover audit.
        claimed = session.execute(
            CLAIM_PG,
            {
                "types": list(types),
                "now": now,
                "limit": limit,
                "owner": owner,
                "token": token,
                "lease_until": lease_until,
            },
        )
        return [
            Claim(row.id, token, row.previous_owner, row.previous_until, row.type)
            for row in claimed
        ]
    candidates = _claimable(
        select(WorkItem.id, WorkItem.lease_owner, WorkItem.leased_until, WorkItem.type),
        types,
        now,
    ).limit(limit)
    # SQLite (inside the BEGIN IMMEDIATE lock, no round trips): its RETURNING cannot
    # name the FROM clause, so read the candidates first.
    rows = session.execute(candidates).all()
    if not rows:
        return []
    session.execute(
        update(WorkItem)
        .where(WorkItem.id.in_([row.id for row in rows]))
        .values(lease_owner=owner, lease_token=token, leased_until=lease_until)
        .execution_options(synchronize_session=False)
    )
    return [Claim(row.id, token, row.lease_owner, row.leased_until, row.type) for row in rows]


def _claimable(query: _Query, types: Sequence[str], now: datetime) -> _Query:
    """Admitted, active, unleased (or lease expired), not backing off; ready-since order."""
    return query.where(
        WorkItem.admission == inline(ADMITTED),
        WorkItem.phase == inline(ACTIVE),
        WorkItem.type.in_(types),
        or_(WorkItem.leased_until.is_(None), WorkItem.leased_until < now),
        or_(WorkItem.run_after.is_(None), WorkItem.run_after <= now),
    ).order_by(
        # Ready-since order: an item resumed after a deadline or a backoff goes behind
        # the items that were waiting before it became ready again.
        func.coalesce(WorkItem.run_after, WorkItem.admitted_at),
        WorkItem.seq,
    )


def lock_claimable(
    session: Session,
    *,
    types: Sequence[str],
    limit: int,
    now: datetime,
    among: Sequence[uuid.UUID] | None = None,
) -> list[WorkItem]:
    """Load up to `limit` claimable items and lock them until the transaction ends.

    The claim of a batch that finishes in this transaction: no lease is written, the
    row locks fence it (PostgreSQL skips rows other transactions hold; SQLite runs
    inside the `BEGIN IMMEDIATE` lock). `among` limits the choice to those items.
    """
    if limit <= 0 or not types:
        return []
    query = _claimable(select(WorkItem), types, now).limit(limit)
    if among is not None:
        query = query.where(WorkItem.id.in_(among))
    if is_postgres(session):
        query = query.with_for_update(skip_locked=True)
    return list(session.execute(query.execution_options(populate_existing=True)).scalars())


def lease(
    session: Session,
    item_ids: Sequence[uuid.UUID],
    *,
    owner: str,
    token: str,
    lease_until: datetime,
) -> None:
    """Lease items this transaction holds locked (`lock_claimable`) to `owner`."""
    if item_ids:
        session.execute(
            update(WorkItem)
            .where(WorkItem.id.in_(item_ids))
            .values(lease_owner=owner, lease_token=token, leased_until=lease_until)
            .execution_options(synchronize_session=False)
        )


def next_due(session: Session, types: Sequence[str], now: datetime) -> datetime | None:
    """When the next admitted item becomes claimable: a lease or a backoff runs out.

    Only what is known now; new work announces itself through wake-ups.
    """
    if not types:
        return None
    lease_ends, backoff_ends = session.execute(
        select(
            func.min(case((WorkItem.leased_until > now, WorkItem.leased_until))),
            func.min(case((WorkItem.run_after > now, WorkItem.run_after))),
        ).where(
            WorkItem.admission == inline(ADMITTED),
            WorkItem.phase == inline(ACTIVE),
            WorkItem.type.in_(types),
        )
    ).one()
    known = [moment for moment in (lease_ends, backoff_ends) if moment is not None]
    return min(known) if known else None


def drop_lease(
    session: Session, item_id: uuid.UUID, token: str, *, resume_at: datetime | None = None
) -> bool:
    """Let go of a lease the token still holds; the item keeps its slot.

    With `resume_at` the item is claimable again from then on, behind the items that
    were already waiting. False when the lease was no longer this token's.
    """
    values: dict[str, object] = {"lease_owner": None, "lease_token": None, "leased_until": None}
    if resume_at is not None:
        values["run_after"] = resume_at
    result = session.execute(
        update(WorkItem)
        .where(WorkItem.id == item_id, WorkItem.lease_token == token)
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


def give_back(
    session: Session,
    leased: Iterable[tuple[uuid.UUID, str]],
    *,
    resume_at: datetime | None = None,
    announce: bool = True,
) -> None:
    """`drop_lease` of each (item id, token); with `announce`, every replica's scheduler
    is told that admitted items are claimable again (once this commits)."""
    dropped = [
        drop_lease(session, item_id, token, resume_at=resume_at) for item_id, token in leased
    ]
    if dropped and announce:
        signal(session, ITEMS_ADMITTED)
