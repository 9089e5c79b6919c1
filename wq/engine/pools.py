"""What operators see of admission: per-project pool usage and the FIFO queue."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Integer, Select, and_, case, cast, func, literal, select, union_all
from sqlalchemy.orm import Session

from wq.engine.config import Config
from wq.engine.models import (
    ADMITTED,
    ALERT_LANE,
    FAILED,
    LANES,
    NORMAL_LANE,
    QUEUED,
    WorkItem,
    utcnow,
)
from wq.engine.store import inline


@dataclass
class LaneUsage:
    """One lane of one project's pool."""

    capacity: int
    in_flight: int = 0
    queued: int = 0


@dataclass
class PoolStatus:
    """A project's pool: capacities, usage per lane, autonomous backlog, oldest wait."""

    project: str
    capacity: int
    alert_capacity: int
    queued_autonomous_cap: int
    lanes: dict[str, LaneUsage] = field(default_factory=dict)
    queued_autonomous: int = 0
    oldest_queued_at: datetime | None = None
    # Queued or admitted items that failed an attempt and wait to be taken again.
    backing_off: int = 0
    # Items of the project in phase failed (they hold nothing, but someone should look).
    failed: int = 0


@dataclass(frozen=True)
class QueueEntry:
    """A queued item and its position in its project's lane (1 = next)."""

    position: int
    id: uuid.UUID
    type: str
    project: str
    lane: str
    seq: int
    autonomous: bool
    queued_at: datetime | None
    attempts: int = 0
    # Later than now for an item backing off: it is not taken before then.
    run_after: datetime | None = None


def _usage(admission: str, now: datetime, project: str | None) -> Select[Any]:
    """Per project and lane: count, autonomous, oldest wait, backing off.

    One statement per admission state: an equality matches that state's partial index
    (`IN (queued, admitted)` matches neither and reads the whole table).
    """
    backing_off = case((and_(WorkItem.run_after > now, WorkItem.attempts > 0), 1), else_=0)
    columns: list[Any] = [
        WorkItem.project,
        WorkItem.lane,
        literal(admission),
        func.count(),
        func.sum(cast(WorkItem.autonomous, Integer)),
        func.min(WorkItem.queued_at),
        func.sum(backing_off),
    ]
    query: Select[Any] = (
        select(*columns)
        .where(WorkItem.admission == inline(admission))
        .group_by(WorkItem.project, WorkItem.lane)
    )
    if project is not None:
        query = query.where(WorkItem.project == project)
    return query


def pool_statuses(
    session: Session, config: Config, project: str | None = None, now: datetime | None = None
) -> list[PoolStatus]:
    """Pool usage of every project with queued or admitted work (or of one project)."""
    now = now or utcnow()
    query = union_all(_usage(QUEUED, now, project), _usage(ADMITTED, now, project))
    statuses: dict[str, PoolStatus] = {}

    def status_of(name: str) -> PoolStatus:
        if name not in statuses:
            pool = config.pool_for(name)
            statuses[name] = PoolStatus(
                project=name,
                capacity=pool.capacity,
                alert_capacity=pool.alert_capacity,
                queued_autonomous_cap=pool.queued_autonomous_cap,
                lanes={
                    ALERT_LANE: LaneUsage(pool.alert_capacity),
                    NORMAL_LANE: LaneUsage(pool.capacity),
                },
            )
        return statuses[name]

    for name, lane, admission, count, autonomous, oldest, backing_off in session.execute(query):
        status = status_of(name)
        status.backing_off += int(backing_off or 0)
        usage = status.lanes[lane] if lane in LANES else status.lanes[NORMAL_LANE]
        if admission == QUEUED:
            usage.queued += int(count)
            status.queued_autonomous += int(autonomous or 0)
            if oldest is not None and (
                status.oldest_queued_at is None or oldest < status.oldest_queued_at
            ):
                status.oldest_queued_at = oldest
        else:
            usage.in_flight += int(count)
    if project is not None:
        status_of(project)
    if statuses:
        # (project, phase) index: one range per project shown.
        failed = (
            select(WorkItem.project, func.count())
            .where(WorkItem.project.in_(sorted(statuses)), WorkItem.phase == inline(FAILED))
            .group_by(WorkItem.project)
        )
        for name, count in session.execute(failed):
            statuses[name].failed = int(count)
    return [statuses[name] for name in sorted(statuses)]


def queue(
    session: Session, project: str, lane: str | None = None, limit: int = 100
) -> list[QueueEntry]:
    """A project's queued items in admission order, with their position per lane."""
    lanes = [lane] if lane else list(LANES)
    entries: list[QueueEntry] = []
    for name in lanes:
        entries.extend(queue_page(session, project, name, limit=limit).entries)
    return entries


@dataclass(frozen=True)
class QueuePage:
    """One page of a lane's FIFO; `next_after` (a seq) continues it."""

    entries: list[QueueEntry]
    next_after: int | None


def queue_page(
    session: Session, project: str, lane: str, *, limit: int = 100, after: int | None = None
) -> QueuePage:
    """Up to `limit` queued items of one lane after seq `after`, with their true positions.

    Both statements are ranges of the partial `ix_work_items_queue` index (project, lane,
    seq): the page reads only its rows, and the position of its first row counts only
    the index entries before it.
    """
    where = [
        WorkItem.project == project,
        WorkItem.lane == lane,
        WorkItem.admission == inline(QUEUED),
    ]
    ahead = 0
    query = select(WorkItem).where(*where)
    if after is not None:
        query = query.where(WorkItem.seq > after)
        ahead = session.execute(
            select(func.count()).select_from(WorkItem).where(*where, WorkItem.seq <= after)
        ).scalar_one()
    rows = list(session.execute(query.order_by(WorkItem.seq).limit(limit + 1)).scalars())
    page = rows[:limit]
    entries = [
        QueueEntry(
            position=position,
            id=item.id,
            type=item.type,
            project=item.project,
            lane=item.lane,
            seq=item.seq or 0,
            autonomous=item.autonomous,
            queued_at=item.queued_at,
            attempts=item.attempts,
            run_after=item.run_after,
        )
        for position, item in enumerate(page, start=ahead + 1)
    ]
    more = len(rows) > limit and bool(page)
    return QueuePage(entries=entries, next_after=entries[-1].seq if more else None)
