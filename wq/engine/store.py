"""The dialect seam: the few statements that differ between PostgreSQL and SQLite.

Everything else in the engine is the same SQLAlchemy code on both databases. Here:
the admission sequence, the admission, per-project and per-item locks, the set-based
admission statement, the batch claim, and the cross-process wake-up (`NOTIFY`).
"""

from __future__ import annotations

import uuid
import zlib
from collections.abc import Sequence
from datetime import datetime
from typing import Any, NamedTuple, TypeVar

from sqlalchemy import (
    BigInteger,
    BindParameter,
    String,
    Uuid,
    and_,
    bindparam,
    case,
    func,
    literal,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.orm import Session
from sqlalchemy.sql import Select

from wq.engine.models import (
    ACTIVE,
    ADMITTED,
    QUEUED,
    SequenceCounter,
    UtcDateTime,
    WorkItem,
    utcnow,
)

ADMISSION_SEQUENCE = "wq_admission_seq"
NOTIFY_CHANNEL = "wq_events"
_PROJECT_LOCK_SPACE = 0x5751  # "WQ": keeps our advisory keys apart from other users'
_ITEM_LOCK_SPACE = 0x5752
_ADMISSION_LOCK_SPACE = 0x5753  # one key: the whole admission pass


def inline(value: str) -> BindParameter[str]:
    """A state constant rendered into the SQL text, not sent as a parameter.

    PostgreSQL's generic plans for prepared statements can only use the partial
    indexes (`WHERE admission = 'queued'` ...) when the value is in the statement.
    """
    return literal(value, literal_execute=True)


def is_postgres(session: Session) -> bool:
    """Whether the session's database is PostgreSQL (else SQLite)."""
    return session.get_bind().dialect.name == "postgresql"


_is_postgres = is_postgres


def _lock_key(value: str) -> int:
    # A stable 32-bit key; PostgreSQL's two-key advisory locks take int4 values.
    return zlib.crc32(value.encode()) - 2**31


def next_seq(session: Session) -> int:
    """A fresh value of the global admission sequence; never reused, never from a clock."""
    if _is_postgres(session):
        return int(session.execute(text(f"SELECT nextval('{ADMISSION_SEQUENCE}')")).scalar_one())
    value = session.execute(
        update(SequenceCounter)
        .where(SequenceCounter.name == ADMISSION_SEQUENCE)
        .values(value=SequenceCounter.value + 1)
        .returning(SequenceCounter.value)
    ).scalar_one()
    return int(value)


def lock_project(session: Session, project: str) -> None:
    """Serialize admission of one project until the transaction ends.

    PostgreSQL: a transaction-scoped advisory lock, so two replicas admitting the same
    project queue up. SQLite: the `BEGIN IMMEDIATE` write lock already serializes.
    """
    if _is_postgres(session):
        session.execute(
            text("SELECT pg_advisory_xact_lock(:space, :key)"),
            {"space": _PROJECT_LOCK_SPACE, "key": _lock_key(project)},
        )


def lock_admission(session: Session) -> None:
    """Serialize admission passes across replicas until the transaction ends.

    One lock per pass (a pass takes milliseconds): in-flight counts read under it
    cannot be overtaken by another replica's admissions. SQLite: `BEGIN IMMEDIATE`.
    """
    if _is_postgres(session):
        session.execute(
            text("SELECT pg_advisory_xact_lock(:space, :key)"),
            {"space": _ADMISSION_LOCK_SPACE, "key": 0},
        )


# PostgreSQL: every lane in one statement. Lanes without work waiting are dropped
# first by one probe each (a release signals its project whether or not anything is
# queued there, and counting a busy lane's in-flight items is the costly part); for
# the others the in-flight count (index-only on ix_work_items_in_flight) gives the free
# slots, and a LATERAL probe of ix_work_items_queue takes that many heads in seq order,
# so a pass reads what it admits, never the backlog behind it. Each LATERAL names the
# one before it, which fixes that order whatever the planner believes of the table
# (without statistics, a semi-join here read the whole queue). The heads are gathered
# into an array first (an InitPlan run once), so the rows are then updated by primary
# key (a join here was once planned as a loop over the whole queue). The outer test of
# `admission` is written so that it cannot match the partial indexes: without
# statistics the planner believes ix_work_items_queue empty and would read the whole
# queue through it to find these rows. (It still re-checks a row changed meanwhile.)
_ADMIT_HEADS_PG = text(
    f"""
UPDATE work_items AS w
SET admission = '{ADMITTED}', admitted_at = :now, updated_at = :now
WHERE w.admission || '' = '{QUEUED}' AND w.id = ANY(ARRAY(
    SELECT h.id
    FROM unnest(CAST(:projects AS text[]), CAST(:lanes AS text[]), CAST(:capacities AS int[]))
        AS c(project, lane, capacity)
    CROSS JOIN LATERAL (
        SELECT e.project, e.lane FROM work_items AS e
        WHERE e.project = c.project AND e.lane = c.lane AND e.admission = '{QUEUED}'
            AND (e.run_after IS NULL OR e.run_after <= :now)
        LIMIT 1
    ) AS waiting
    CROSS JOIN LATERAL (
        SELECT count(*) AS busy FROM work_items AS a
        WHERE a.project = waiting.project AND a.lane = waiting.lane
            AND a.admission = '{ADMITTED}'
    ) AS f
    CROSS JOIN LATERAL (
        SELECT q.id FROM work_items AS q
        WHERE q.project = c.project AND q.lane = c.lane AND q.admission = '{QUEUED}'
            AND (q.run_after IS NULL OR q.run_after <= :now)
        ORDER BY q.seq
        LIMIT greatest(c.capacity - f.busy, 0)
    ) AS h
))
RETURNING w.id, w.project, w.lane, w.seq, w.queued_at
"""
).columns(id=Uuid(), project=String(), lane=String(), seq=BigInteger(), queued_at=UtcDateTime())


_Query = TypeVar("_Query", bound="Select[*tuple[Any, ...]]")


class AdmittedRow(NamedTuple):
    """One item `admit_heads` admitted."""

    id: uuid.UUID
    project: str
    lane: str
    seq: int | None
    queued_at: datetime | None


def admit_heads(
    session: Session, lanes: Sequence[tuple[str, str, int]], now: datetime
) -> list[AdmittedRow]:
    """Admit the heads of each (project, lane, capacity) into its free slots.

    Returns every admitted item (with when it was queued), unordered. The caller
    holds the admission lock. PostgreSQL: one statement for all lanes; SQLite (one
    writer, no round trips): two index probes per lane and one UPDATE, in the same
    transaction.
    """
    if not lanes:
        return []
    if _is_postgres(session):
        rows = session.execute(
            _ADMIT_HEADS_PG,
            {
                "now": now,
                "projects": [lane[0] for lane in lanes],
                "lanes": [lane[1] for lane in lanes],
                "capacities": [lane[2] for lane in lanes],
            },
        )
        return [AdmittedRow(row.id, row.project, row.lane, row.seq, row.queued_at) for row in rows]
    # SQLite (one writer, no round trips): the heads of each lane and, if there are
    # any, its busy count, by index probes with prebuilt statements, then one UPDATE
    # by primary key.
    chosen: list[uuid.UUID] = []
    for project, lane, capacity in lanes:
        lane_key = {"project": project, "lane": lane}
        heads = session.execute(_LANE_HEADS, {**lane_key, "now": now, "free": capacity}).scalars()
        waiting = heads.all()
        if waiting:  # only then are its busy slots worth counting
            busy = int(session.execute(_LANE_BUSY, lane_key).scalar_one())
            chosen.extend(waiting[: max(capacity - busy, 0)])
    admitted: list[AdmittedRow] = []
    for start in range(0, len(chosen), 500):
        rows = session.execute(
            update(WorkItem)
            .where(
                WorkItem.id.in_(chosen[start : start + 500]), WorkItem.admission == inline(QUEUED)
            )
            .values(admission=ADMITTED, admitted_at=now, updated_at=now)
            .returning(
                WorkItem.id, WorkItem.project, WorkItem.lane, WorkItem.seq, WorkItem.queued_at
            )
            .execution_options(synchronize_session=False)
        )
        admitted.extend(AdmittedRow(*row) for row in rows)
    return admitted


_LANE_BUSY = (
    select(func.count())
    .select_from(WorkItem)
    .where(
        WorkItem.project == bindparam("project"),
        WorkItem.lane == bindparam("lane"),
        WorkItem.admission == inline(ADMITTED),
    )
)
_LANE_HEADS = (
    select(WorkItem.id)
    .where(
        WorkItem.project == bindparam("project"),
        WorkItem.lane == bindparam("lane"),
        WorkItem.admission == inline(QUEUED),
        # An item whose run could not start waits out its backoff in line.
        or_(WorkItem.run_after.is_(None), WorkItem.run_after <= bindparam("now")),
    )
    .order_by(WorkItem.seq)
    .limit(bindparam("free"))
)


def lock_item(session: Session, item_id: uuid.UUID) -> None:
    """Serialize event intake and event draining for one item until the transaction ends."""
    if _is_postgres(session):
        session.execute(
            text("SELECT pg_advisory_xact_lock(:space, :key)"),
            {"space": _ITEM_LOCK_SPACE, "key": _lock_key(str(item_id))},
        )


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
SET lease_owner = :owner, lease_token = :token, leased_until = :lease_until,
    updated_at = :updated_at
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
    token = token or str(uuid.uuid4())
    if _is_postgres(session):
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
                "updated_at": utcnow(),
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
    if _is_postgres(session):
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


def fence_lease(session: Session, item_id: uuid.UUID, token: str, now: datetime) -> bool:
    """Fence: true, and the row locked until commit, while the token still owns the item.

    Done as an UPDATE so that on PostgreSQL the row stays locked until this
    transaction commits: no other worker can take the lease in between.
    """
    result = session.execute(
        update(WorkItem)
        .where(and_(WorkItem.id == item_id, WorkItem.lease_token == token))
        .values(updated_at=now)
        .execution_options(synchronize_session=False)
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


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


def notify(session: Session, payloads: Sequence[str], origin: str) -> None:
    """Tell other replicas on the same PostgreSQL about new work (delivered on commit).

    `origin` names the wake-up hub that already knows, so its listener skips them.
    """
    if payloads and _is_postgres(session):
        session.execute(
            text(
                "SELECT pg_notify(:channel, payload)"
                " FROM unnest(CAST(:payloads AS text[])) AS payload"
            ),
            {"channel": NOTIFY_CHANNEL, "payloads": [f"{origin}|{p}" for p in payloads]},
        )
