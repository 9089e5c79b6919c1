"""Throughput, failures and waits over time, read from the audit trail and the items.

Every state change has its audit row (`wq.engine.audit`), so the counts per time
bucket are one grouped query over the window's rows, found through the index on
`audit_log.at`; nothing is written on the hot path to keep them. An admission's row
carries its wait (queued -> admitted); the ends join their items by primary key:
admitted -> done is the end's time minus the item's `admitted_at`. The cost follows
the rows of the window, not the history.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Float,
    Integer,
    SQLColumnExpression,
    and_,
    cast,
    func,
    literal,
    or_,
    select,
)
from sqlalchemy.orm import Session
from sqlalchemy.sql import Select

from wq.engine.models import (
    ACTIVE,
    CANCELLED,
    COMPLETED,
    FAILED,
    LANES,
    QUEUED,
    AuditEntry,
    PendingEvent,
    WorkItem,
)

# What each counted series is in the audit trail: an event type, and for phase changes
# the phase the item went to.
CREATED = "created"
ADMITTED_SERIES = "admitted"
RETRIED = "retried"
SERIES = (CREATED, ADMITTED_SERIES, COMPLETED, FAILED, RETRIED, CANCELLED)
PHASE_CHANGED = "phase_changed"
ENDS = (COMPLETED, FAILED, CANCELLED)
# A bound on the durations read for the percentiles of one request: a window busier
# than this takes its percentiles from the newest ones.
MAX_DURATIONS = 200_000


@dataclass
class Bucket:
    """The counts and waits of one step of the window."""

    start: datetime
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SERIES, 0))
    waits: list[float] = field(default_factory=list)  # queued -> admitted, seconds
    runs: list[float] = field(default_factory=list)  # admitted -> done, seconds


@dataclass(frozen=True)
class LaneNow:
    """A lane's queue at the time of the request."""

    lane: str
    depth: int
    oldest_queued_at: datetime | None


@dataclass(frozen=True)
class Stats:
    """The window's buckets, oldest first, and the lanes now."""

    start: datetime
    end: datetime
    step: timedelta
    buckets: list[Bucket]
    lanes: list[LaneNow]
    pending_events: int = 0  # stored for the items and not applied yet, now


def percentile(values: Sequence[float], fraction: float) -> float | None:
    """The nearest-rank percentile of `values` (None for none)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def _seconds_between(
    session: Session, later: SQLColumnExpression[Any], earlier: SQLColumnExpression[Any]
) -> ColumnElement[float]:
    """`later - earlier` in seconds, as each database computes it."""
    if session.get_bind().dialect.name == "postgresql":
        return cast(func.extract("epoch", later - earlier), Float)
    return (func.julianday(later) - func.julianday(earlier)) * 86400.0


def _bucket_of(
    session: Session, at: SQLColumnExpression[Any], start: datetime, step: timedelta
) -> ColumnElement[int]:
    """The index of the bucket `at` falls in (0: the oldest)."""
    naive_start = (
        start if session.get_bind().dialect.name == "postgresql" else start.replace(tzinfo=None)
    )
    return cast(
        func.floor(_seconds_between(session, at, literal(naive_start)) / step.total_seconds()),
        Integer,
    )


def compute(
    session: Session,
    *,
    end: datetime,
    window: timedelta,
    step: timedelta,
    item_types: Sequence[str] | None = None,
    project: str | None = None,
) -> Stats:
    """The stats of `[end - window, end)` in steps of `step`, of items of `item_types`
    (all when None) and of `project`."""
    start = end - window
    buckets = [Bucket(start + step * index) for index in range(math.ceil(window / step))]
    audit = AuditEntry
    phase = audit.new_state["phase"].as_string()
    bucket = _bucket_of(session, audit.at, start, step)
    filters: list[ColumnElement[bool]] = [audit.at >= start, audit.at < end]
    if project is not None:
        filters.append(audit.new_state["project"].as_string() == project)
    counted = or_(
        audit.event_type.in_((CREATED, ADMITTED_SERIES, RETRIED)),
        and_(audit.event_type == PHASE_CHANGED, phase.in_(ENDS)),
    )
    query = select(bucket, audit.event_type, phase, func.count()).where(*filters, counted)
    if item_types is not None:
        query = query.join(WorkItem, WorkItem.id == audit.work_item_id).where(
            WorkItem.type.in_(item_types)
        )
    query = query.group_by(bucket, audit.event_type, phase)
    for index, event_type, new_phase, count in session.execute(query):
        series = new_phase if event_type == PHASE_CHANGED else event_type
        _at(buckets, index).counts[series] += int(count)
    for index, wait in _durations(session, filters, bucket, item_types, ADMITTED_SERIES):
        _at(buckets, index).waits.append(wait)
    ends = [*filters, audit.event_type == PHASE_CHANGED, phase.in_(ENDS)]
    for index, run in _durations(session, ends, bucket, item_types, None):
        _at(buckets, index).runs.append(run)
    lanes = lanes_now(session, item_types, project)
    return Stats(start, end, step, buckets, lanes, pending_events_now(session, item_types, project))


def _at(buckets: list[Bucket], index: int) -> Bucket:
    # A row stamped exactly at `end` or rounding at an edge stays in the window's ends.
    return buckets[min(max(int(index), 0), len(buckets) - 1)]


def _durations(
    session: Session,
    filters: list[ColumnElement[bool]],
    bucket: ColumnElement[int],
    item_types: Sequence[str] | None,
    event_type: str | None,
) -> Iterable[tuple[int, float]]:
    """(bucket, seconds) of the window's admissions (queued -> admitted) or ends."""
    query = (
        _waits_query(session, filters, bucket, item_types, event_type)
        if event_type is not None
        else _runs_query(session, filters, bucket, item_types)
    )
    for index, seconds in session.execute(query):
        if seconds is not None and seconds >= 0:
            yield index, float(seconds)


def _runs_query(
    session: Session,
    filters: list[ColumnElement[bool]],
    bucket: ColumnElement[int],
    item_types: Sequence[str] | None,
) -> Select[int, float]:
    """The ends' runs: the end's time minus its item's `admitted_at`.

    The window's newest ends are read first and each one's item looked up by its key
    (a subquery per row): a join let PostgreSQL start from the items instead, a scan
    of every item ever kept when its statistics said few carry `admitted_at`. An end
    whose item is gone, never admitted or of another type has no run (NULL, skipped by
    the caller): with `item_types`, the runs are those of the newest `MAX_DURATIONS`
    ends of any type.
    """
    audit = AuditEntry
    item = WorkItem.__table__.alias("ended_item")
    wheres = [item.c.id == audit.work_item_id]
    if item_types is not None:
        wheres.append(item.c.type.in_(item_types))
    admitted_at = select(item.c.admitted_at).where(*wheres).scalar_subquery()
    duration = _seconds_between(session, audit.at, admitted_at)
    return select(bucket, duration).where(*filters).order_by(audit.at.desc()).limit(MAX_DURATIONS)


def _waits_query(
    session: Session,
    filters: list[ColumnElement[bool]],
    bucket: ColumnElement[int],
    item_types: Sequence[str] | None,
    event_type: str,
) -> Select[Any]:
    """The admissions' waits: each row's own `queued_seconds`, else its item's.

    Rows written before admissions carried their wait fall back to the item's latest
    admission (`admitted_at - queued_at`), looked up for those rows alone: the
    database evaluates COALESCE's second argument only when the first is null.
    """
    audit = AuditEntry
    item = WorkItem.__table__.alias("admitted_item")
    from_item = (
        select(_seconds_between(session, item.c.admitted_at, item.c.queued_at))
        .where(item.c.id == audit.work_item_id)
        .scalar_subquery()
    )
    wait = func.coalesce(audit.extra["queued_seconds"].as_float(), from_item)
    query = select(bucket, wait).where(*filters, audit.event_type == event_type)
    if item_types is not None:
        query = query.join(WorkItem, WorkItem.id == audit.work_item_id).where(
            WorkItem.type.in_(item_types)
        )
    return query.order_by(audit.at.desc()).limit(MAX_DURATIONS)


def lanes_now(
    session: Session, item_types: Sequence[str] | None, project: str | None
) -> list[LaneNow]:
    """Each lane's queued depth and oldest queued item, now."""
    query = (
        select(WorkItem.lane, func.count(), func.min(WorkItem.queued_at))
        .where(WorkItem.admission == QUEUED, WorkItem.phase == ACTIVE)
        .group_by(WorkItem.lane)
    )
    if item_types is not None:
        query = query.where(WorkItem.type.in_(item_types))
    if project is not None:
        query = query.where(WorkItem.project == project)
    found = {lane: (int(depth), oldest) for lane, depth, oldest in session.execute(query)}
    return [LaneNow(lane, *found.get(lane, (0, None))) for lane in LANES]


def pending_events_now(
    session: Session, item_types: Sequence[str] | None, project: str | None
) -> int:
    """Events stored and not applied yet (of the type's or project's items, if given)."""
    query = select(func.count()).select_from(PendingEvent)
    if item_types is not None or project is not None:
        query = query.join(WorkItem, WorkItem.id == PendingEvent.work_item_id)
    if item_types is not None:
        query = query.where(WorkItem.type.in_(item_types))
    if project is not None:
        query = query.where(WorkItem.project == project)
    return int(session.execute(query).scalar_one())
