"""The admission's statements: its lock across replicas, and the admission of queue heads.

An admission pass (`wq.engine.admission`) takes one lock for all replicas, then admits
the heads of each project's lanes into their free slots, FIFO by `seq`. On PostgreSQL
the lock is taken only if one of the pass's projects has queued work (one statement,
never in a pipeline), and one statement admits every lane's heads and writes their
audit rows; on SQLite the write lock serialises passes, and each lane is two index
probes, then one UPDATE for all.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import BigInteger, String, Uuid, bindparam, func, or_, select, text, update
from sqlalchemy.orm import Session

from wq.engine import jsontext
from wq.engine.models import ADMITTED, ALERT_LANE, NORMAL_LANE, QUEUED, UtcDateTime, WorkItem
from wq.engine.pipelined import PIPELINED_BEGIN
from wq.engine.store import inline, is_postgres

_ADMISSION_LOCK_SPACE = 0x5753  # one key: the whole admission pass (see store's spaces)
# How long a transaction holding the admission lock may sit idle before PostgreSQL ends
# its session. A pass holds the lock for milliseconds and makes no outbound call under
# it; a holder idle longer is a replica stopped (SIGSTOP, a frozen VM, a partition),
# and every replica's admission would wait for it. Below the statement timeout (10 s),
# so that the others' waits for the lock end before their statements are cancelled.
ADMISSION_IDLE_LIMIT_SECONDS = 5.0


def lock_admission(session: Session, projects: Sequence[str]) -> bool:
    """Serialize admission passes across replicas until the transaction ends, if one of
    `projects` has queued work; False (no lock) if none has: nothing to admit.

    One lock per pass (a pass takes milliseconds): in-flight counts read under it
    cannot be overtaken by another replica's admissions. SQLite: `BEGIN IMMEDIATE`
    (always True). On PostgreSQL the test and the lock are one statement: most passes
    follow releases, and a release signals its project whether or not work waits
    there; an item queued after this statement's snapshot signals a pass of its own,
    which sees what committed before it.
    """
    if not is_postgres(session):
        return True
    # Never in a pipeline (`wq.engine.pipelined`): PostgreSQL counts a transaction idle
    # only once a statement's sync has arrived, and a replica stopped between the
    # lock's statement and the sync after it would hold the lock with no bound.
    parameters = {
        "space": _ADMISSION_LOCK_SPACE,
        "key": 0,
        "projects": list(projects),
        "idle_limit": f"{round(ADMISSION_IDLE_LIMIT_SECONDS * 1000)}ms",
    }
    taken = session.execute(
        _LOCK_ADMISSION_IF_QUEUED, parameters, execution_options={PIPELINED_BEGIN: False}
    )
    return taken.first() is not None


# One probe of ix_work_items_queue per project; the lock only once one has found a row
# (the EXISTS is the plan's one-time filter, evaluated before the lock function). With
# the lock, the transaction's idle bound (`set_config(..., true)`: until it ends).
_LOCK_ADMISSION_IF_QUEUED = text(
    f"""
SELECT pg_advisory_xact_lock(:space, :key),
    set_config('idle_in_transaction_session_timeout', :idle_limit, true)
WHERE EXISTS (
    SELECT FROM unnest(CAST(:projects AS text[])) AS c(project)
    CROSS JOIN LATERAL (
        SELECT FROM work_items AS e
        WHERE e.project = c.project AND e.admission = '{QUEUED}'
        LIMIT 1
    ) AS waiting
)"""
)


# PostgreSQL: every lane in one statement. Lanes without work waiting are dropped
# first by one probe each (a release signals its project whether or not anything is
# queued there, and counting a busy lane's in-flight items is the costly part); for
# the others the in-flight count (index-only on ix_work_items_in_flight) gives the free
# slots, and a LATERAL probe of ix_work_items_queue takes that many heads in seq order,
# so a pass reads what it admits, never the backlog behind it. Each LATERAL names the
# one before it, which fixes that order whatever the planner believes of the table
# (without statistics, a semi-join here read the whole queue). The heads are gathered
# into an array first (an InitPlan run once), so the rows are then locked and updated
# by primary key (a join here was once planned as a loop over the whole queue). The
# tests of `admission` on the rows are written so that they cannot match the partial
# indexes: without statistics the planner believes ix_work_items_queue empty and would
# read the whole queue through it to find these rows.
#
# A head another transaction has locked (an operator's session, a long bulk change) is
# skipped, never waited for: waiting would hold up every lane of the pass, and the
# admission lock every replica's passes with it. So that nothing overtakes it, its
# lane admits none of the heads behind it either; the lane comes back as `held` (a row
# with no id), for the caller to look at again soon.
#
# The admissions' audit rows (`admission.admission_record`'s, the same documents) are
# written by the statement too, in FIFO order per lane, as `admission.admit` sorts them.
_ADMIT_HEADS_PG = text(
    f"""
WITH heads AS MATERIALIZED (
    SELECT h.id, h.project, h.lane, h.seq
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
        SELECT q.id, q.project, q.lane, q.seq FROM work_items AS q
        WHERE q.project = c.project AND q.lane = c.lane AND q.admission = '{QUEUED}'
            AND (q.run_after IS NULL OR q.run_after <= :now)
        ORDER BY q.seq
        LIMIT least(greatest(c.capacity - f.busy, 0), :most)
    ) AS h
), taken AS MATERIALIZED (
    SELECT t.id FROM work_items AS t
    WHERE t.id = ANY(ARRAY(SELECT heads.id FROM heads)) AND t.admission || '' = '{QUEUED}'
    FOR UPDATE SKIP LOCKED
), held AS MATERIALIZED (
    SELECT heads.project, heads.lane, min(heads.seq) AS seq
    FROM heads LEFT JOIN taken ON taken.id = heads.id
    WHERE taken.id IS NULL
    GROUP BY heads.project, heads.lane
), admitted AS (
    UPDATE work_items AS w
    SET admission = '{ADMITTED}', admitted_at = :now, updated_at = :now
    WHERE w.id = ANY(ARRAY(
        SELECT heads.id FROM heads JOIN taken ON taken.id = heads.id
        WHERE NOT EXISTS (
            SELECT FROM held
            WHERE held.project = heads.project AND held.lane = heads.lane
                AND held.seq < heads.seq
        )
    ))
    RETURNING w.id, w.project, w.lane, w.seq, w.queued_at
), audited AS (
    INSERT INTO audit_log (at, event_type, work_item_id, actor, old_state, new_state,
        "trigger", metadata)
    SELECT :now, 'admitted', a.id, :actor,
        jsonb_build_object('admission', '{QUEUED}', 'lane', a.lane, 'seq', coalesce(a.seq, 0),
            'project', a.project),
        jsonb_build_object('admission', '{ADMITTED}', 'lane', a.lane,
            'seq', coalesce(a.seq, 0), 'project', a.project),
        CAST(:trigger AS jsonb),
        CASE WHEN a.queued_at IS NULL THEN CAST('null' AS jsonb) ELSE jsonb_build_object(
            'queued_seconds',
            greatest(EXTRACT(EPOCH FROM CAST(:now AS timestamptz) - a.queued_at), 0)) END
    FROM admitted AS a
    ORDER BY a.project COLLATE "C",
        CASE a.lane WHEN '{ALERT_LANE}' THEN 0 WHEN '{NORMAL_LANE}' THEN 1 ELSE 2 END, a.seq
)
SELECT id, project, lane, seq, queued_at FROM admitted
UNION ALL
SELECT NULL, project, lane, NULL, NULL FROM held
"""
).columns(id=Uuid(), project=String(), lane=String(), seq=BigInteger(), queued_at=UtcDateTime())


class AdmittedRow(NamedTuple):
    """One item `admit_heads` admitted."""

    id: uuid.UUID
    project: str
    lane: str
    seq: int | None
    queued_at: datetime | None


class AdmittedHeads(NamedTuple):
    """What `admit_heads` did: the items it admitted, and the (project, lane) pairs it
    left alone because another transaction held one of their heads."""

    admitted: list[AdmittedRow]
    held: set[tuple[str, str]]
    audited: bool = False  # their audit rows are written (`actor`, `trigger`)


def admit_heads(
    session: Session,
    lanes: Sequence[tuple[str, str, int]],
    now: datetime,
    *,
    actor: str,
    trigger: dict[str, Any],
    most: int | None = None,
) -> AdmittedHeads:
    """Admit the heads of each (project, lane, capacity) into its free slots, at most
    `most` per lane (None: no bound).

    On PostgreSQL the admissions' audit rows (by `actor`, for `trigger`) are written by
    the same statement (`audited`); the caller writes them elsewhere.

    Returns every admitted item (with when it was queued), unordered, and the lanes
    held up by a head another transaction has locked. The caller holds the admission
    lock. PostgreSQL: one statement for all lanes; SQLite (one writer, no row locks,
    no round trips): two index probes per lane and one UPDATE, in the same transaction.
    """
    if not lanes:
        return AdmittedHeads([], set())
    if is_postgres(session):
        rows = session.execute(
            _ADMIT_HEADS_PG,
            {
                "now": now,
                "actor": actor,
                "trigger": jsontext.dumps(trigger),
                "projects": [lane[0] for lane in lanes],
                "lanes": [lane[1] for lane in lanes],
                "capacities": [lane[2] for lane in lanes],
                "most": most,  # NULL: LEAST ignores it
            },
        )
        result = AdmittedHeads([], set(), audited=True)
        for row in rows:
            if row.id is None:
                result.held.add((row.project, row.lane))
            else:
                result.admitted.append(
                    AdmittedRow(row.id, row.project, row.lane, row.seq, row.queued_at)
                )
        return result
    # SQLite (one writer, no round trips): the heads of each lane and, if there are
    # any, its busy count, by index probes with prebuilt statements, then one UPDATE
    # by primary key.
    chosen: list[uuid.UUID] = []
    for project, lane, capacity in lanes:
        lane_key = {"project": project, "lane": lane}
        share = capacity if most is None else min(capacity, most)
        heads = session.execute(_LANE_HEADS, {**lane_key, "now": now, "free": share}).scalars()
        waiting = heads.all()
        if waiting:  # only then are its busy slots worth counting
            busy = int(session.execute(_LANE_BUSY, lane_key).scalar_one())
            chosen.extend(waiting[: min(max(capacity - busy, 0), share)])
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
    return AdmittedHeads(admitted, set())


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
