"""The admission dispatcher: per-project pools, strict FIFO by seq, reserved alert lane.

Each project has a normal pool of capacity N and an alert pool of capacity M that
normal work never uses. A pass admits, per project and under that project's lock,
the alert lane first and then the normal lane, each in `seq` order up to its free
slots. In-flight counts are read from the database on every pass, never carried
over, so a crash or a second replica cannot leak or double-count a slot.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Select, func, or_, select, update
from sqlalchemy.orm import Session, sessionmaker

from wq.engine import store
from wq.engine.audit import AuditRecord, audit
from wq.engine.config import Config, PoolConfig
from wq.engine.models import ADMITTED, ALERT_LANE, NORMAL_LANE, QUEUED, WorkItem
from wq.engine.store import inline
from wq.engine.wakeup import ITEMS_ADMITTED, signal

DISPATCHER = "dispatcher"


@dataclass(frozen=True)
class Admitted:
    """One item admitted by a pass."""

    id: uuid.UUID
    project: str
    lane: str
    seq: int


def queued_projects_query() -> Select[Any]:
    """The statement behind `projects_with_queued` (tests look at its plan)."""
    queued = WorkItem.__table__
    first = select(func.min(queued.c.project).label("project")).where(
        queued.c.admission == inline(QUEUED)
    )
    walk = first.cte("walk", recursive=True)
    following = (
        select(queued.c.project)
        .where(queued.c.admission == inline(QUEUED), queued.c.project > walk.c.project)
        .order_by(queued.c.project)
        .limit(1)
        .scalar_subquery()
    )
    walk = walk.union_all(select(following.label("project")).where(walk.c.project.is_not(None)))
    return select(walk.c.project).where(walk.c.project.is_not(None))


def projects_with_queued(session: Session) -> list[str]:
    """Projects that have queued work, found by a skip scan of the queue index.

    Walks the distinct projects one index probe at a time, so the cost grows with
    the number of projects, not with the backlog.
    """
    return [str(project) for project in session.execute(queued_projects_query()).scalars()]


def _has_queued(session: Session, project: str) -> bool:
    return (
        session.execute(
            select(WorkItem.id)
            .where(WorkItem.project == project, WorkItem.admission == inline(QUEUED))
            .limit(1)
        ).first()
        is not None
    )


def in_flight(session: Session, project: str) -> dict[str, int]:
    """Admitted items of a project per lane, counted now."""
    rows = session.execute(
        select(WorkItem.lane, func.count())
        .where(WorkItem.project == project, WorkItem.admission == inline(ADMITTED))
        .group_by(WorkItem.lane)
    )
    return {lane: int(count) for lane, count in rows}


def admit_project(
    session: Session, project: str, pool: PoolConfig, now: datetime
) -> list[Admitted]:
    """Admit the heads of one project's lanes into its free slots (caller commits)."""
    if not _has_queued(session, project):
        return []  # a slot was released but nothing waits: no lock, no counting
    store.lock_project(session, project)
    counts = in_flight(session, project)
    admitted: list[Admitted] = []
    for lane, capacity in ((ALERT_LANE, pool.alert_capacity), (NORMAL_LANE, pool.capacity)):
        free = capacity - counts.get(lane, 0)
        if free <= 0:
            continue
        heads = (
            select(WorkItem.id)
            .where(
                WorkItem.project == project,
                WorkItem.lane == lane,
                WorkItem.admission == inline(QUEUED),
                # An item whose run could not start waits out its backoff in line.
                or_(WorkItem.run_after.is_(None), WorkItem.run_after <= now),
            )
            .order_by(WorkItem.seq)
            .limit(free)
            .scalar_subquery()
        )
        rows = session.execute(
            update(WorkItem)
            .where(WorkItem.id.in_(heads), WorkItem.admission == inline(QUEUED))
            .values(admission=ADMITTED, admitted_at=now, updated_at=now)
            .returning(WorkItem.id, WorkItem.seq)
            .execution_options(synchronize_session=False)
        )
        # RETURNING has no order: sort, so the audit trail lists admissions in FIFO order.
        admitted.extend(
            Admitted(item_id, project, lane, int(seq or 0))
            for item_id, seq in sorted(rows, key=lambda row: row[1] or 0)
        )
    if admitted:
        audit(
            session,
            *(
                AuditRecord(
                    "admitted",
                    DISPATCHER,
                    entry.id,
                    old_state={
                        "admission": QUEUED,
                        "lane": entry.lane,
                        "seq": entry.seq,
                        "project": project,
                    },
                    new_state={
                        "admission": ADMITTED,
                        "lane": entry.lane,
                        "seq": entry.seq,
                        "project": project,
                    },
                    trigger={"source": "dispatcher"},
                    at=now,
                )
                for entry in admitted
            ),
        )
        signal(session, ITEMS_ADMITTED)
    return admitted


def dispatch(
    sessions: sessionmaker[Session],
    config: Config,
    projects: Iterable[str] | None = None,
    *,
    now: datetime,
) -> list[Admitted]:
    """One admission pass over the given projects (all with queued work when None).

    Each project is admitted in its own short transaction, so one project's lock is
    never held while another is admitted.
    """
    if projects is None:
        with sessions.begin() as session:
            projects = projects_with_queued(session)
    admitted: list[Admitted] = []
    for project in sorted(set(projects)):
        with sessions.begin() as session:
            admitted.extend(admit_project(session, project, config.pool_for(project), now))
    return admitted
