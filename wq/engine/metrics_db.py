"""Gauges that are counts in the database, computed when Prometheus scrapes.

Pool usage, queue depth and age, and live items are read from the database, never
kept as running deltas in a process, which a crash or a second replica would make
drift. The queries follow the indexes the dispatcher already has (the partial indexes
on queued and on admitted items, `(type, phase)` for active items), so their cost
grows with the live working set, not with the history of finished items; failed
items, which stay, are counted by the database itself, in the transaction that fails
or retries them (`wq.engine.failed_counts`).

Each replica is scraped on its own and every replica would read the same numbers, so
one computation is kept for `cache_seconds` and scrapes in between get it: N replicas
scraped every T seconds cost at most N queries per max(T, cache_seconds). The queries
get `budget_seconds` (a statement timeout on PostgreSQL); past the budget, or when the
database is down, the scrape still answers, with the last values it has and
`db_metrics_errors_total` counting the failure.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import Integer, Select, cast, func, select, text
from sqlalchemy.orm import Session, sessionmaker

from wq.engine.config import Config
from wq.engine.failed_counts import failed_per_type
from wq.engine.models import (
    ACTIVE,
    ADMITTED,
    ALERT_LANE,
    DONE,
    FAILED,
    LANES,
    NORMAL_LANE,
    QUEUED,
    AuditEntry,
    PendingEvent,
    WorkItem,
    utcnow,
)
from wq.engine.outage import Outage, is_unavailable
from wq.engine.replicas import count_alive
from wq.engine.store import inline

log = logging.getLogger(__name__)
# Items are counted in two phases: the live ones and the failed ones waiting for an
# operator. Completed and cancelled items only grow; `phase_transitions_total` has them.


@dataclass
class Snapshot:
    """One reading of the database gauges."""

    taken_at: float  # time.monotonic() of the reading
    # (type, phase, admission) -> items
    items: dict[tuple[str, str, str], int] = field(default_factory=dict)
    # (project, lane) -> value
    in_flight: dict[tuple[str, str], int] = field(default_factory=dict)
    queued: dict[tuple[str, str], int] = field(default_factory=dict)
    queued_autonomous: dict[tuple[str, str], int] = field(default_factory=dict)
    oldest_queued_at: dict[tuple[str, str], datetime] = field(default_factory=dict)
    pending_events: int = 0
    replicas_alive: int = 0
    replicas_lost: int = 0
    # Audit entries not archived to S3 yet (read only while archival is on).
    audit_backlog: int | None = None
    oldest_unarchived_at: datetime | None = None


def items_query(types: Sequence[str]) -> Select[str, str, str, int]:
    """Active items per type, phase and admission (the `(type, phase)` index).

    Failed items, which a long history makes many, are not read: their counts are
    kept by the database (`wq.engine.failed_counts`).
    """
    return (
        select(WorkItem.type, WorkItem.phase, WorkItem.admission, func.count())
        .where(WorkItem.type.in_(sorted(types)), WorkItem.phase == ACTIVE)
        .group_by(WorkItem.type, WorkItem.phase, WorkItem.admission)
    )


def queued_query() -> Select[str, str, int, int, datetime | None]:
    """Queued items per project and lane (the dispatcher's partial queue index)."""
    return (
        select(
            WorkItem.project,
            WorkItem.lane,
            func.count(),
            func.sum(cast(WorkItem.autonomous, Integer)),
            func.min(WorkItem.queued_at),
        )
        .where(WorkItem.admission == inline(QUEUED))
        .group_by(WorkItem.project, WorkItem.lane)
    )


def admitted_query() -> Select[str, str, int]:
    """Admitted items per project and lane (the partial in-flight index)."""
    return (
        select(WorkItem.project, WorkItem.lane, func.count())
        .where(WorkItem.admission == inline(ADMITTED))
        .group_by(WorkItem.project, WorkItem.lane)
    )


def audit_backlog_query() -> Select[int]:
    """Audit entries not archived yet (the archiver's partial index)."""
    return select(func.count()).select_from(AuditEntry).where(AuditEntry.archived_at.is_(None))


def oldest_unarchived_query() -> Select[datetime]:
    """When the oldest unarchived entry was written: its id from the partial index."""
    oldest = (
        select(func.min(AuditEntry.id)).where(AuditEntry.archived_at.is_(None)).scalar_subquery()
    )
    return select(AuditEntry.at).where(AuditEntry.id == oldest)


def read_snapshot(session: Session, types: Sequence[str], *, archiving: bool = False) -> Snapshot:
    """Run the gauge queries in one (read) transaction."""
    snapshot = Snapshot(taken_at=time.monotonic())
    if types:
        rows = session.execute(items_query(types))
        snapshot.items = {(t, p, a): int(n) for t, p, a, n in rows}
        for item_type, failed in failed_per_type(session, types).items():
            snapshot.items[(item_type, FAILED, DONE)] = failed
    for project, lane, count, autonomous, oldest in session.execute(queued_query()):
        key = (str(project), _lane(lane))
        snapshot.queued[key] = snapshot.queued.get(key, 0) + int(count)
        snapshot.queued_autonomous[key] = snapshot.queued_autonomous.get(key, 0) + int(
            autonomous or 0
        )
        if oldest is not None and (
            key not in snapshot.oldest_queued_at or oldest < snapshot.oldest_queued_at[key]
        ):
            snapshot.oldest_queued_at[key] = oldest
    for project, lane, count in session.execute(admitted_query()):
        key = (str(project), _lane(lane))
        snapshot.in_flight[key] = snapshot.in_flight.get(key, 0) + int(count)
    snapshot.pending_events = int(
        session.execute(select(func.count()).select_from(PendingEvent)).scalar_one()
    )
    snapshot.replicas_alive, snapshot.replicas_lost = count_alive(session, utcnow())
    if archiving:
        snapshot.audit_backlog = int(session.execute(audit_backlog_query()).scalar_one())
        snapshot.oldest_unarchived_at = session.execute(
            oldest_unarchived_query()
        ).scalar_one_or_none()
    return snapshot


def _lane(lane: str | None) -> str:
    return lane if lane in LANES else NORMAL_LANE


class DatabaseCollector(Collector):
    """A prometheus-client collector reading the database at scrape time (cached)."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        config: Config,
        types: Callable[[], Sequence[str]],
        *,
        prefix: str,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.sessions = sessions
        self.config = config
        self.types = types
        self.prefix = prefix
        self.clock = clock
        self.cache_seconds = config.metrics.cache_seconds
        self.budget_seconds = config.metrics.budget_seconds
        self._snapshot: Snapshot | None = None
        self._errors = 0
        # Pools once seen keep their series at 0 when they go idle: a series that
        # vanishes reads as "no data" on a dashboard and ends an alert's `for`.
        self._pools_seen: set[str] = set()
        self._outage = Outage(
            log,
            during="scrapes serve the last reading until it is back",
            counted="gauge readings failed",
        )
        # One reading at a time; scrapes meanwhile serve the last one (see `snapshot`).
        self._lock = threading.Lock()
        self._tried_at: float | None = None  # time.monotonic() of the last attempt

    def describe(self) -> list[Metric]:
        """No description up front: the registry must not read the database to register."""
        return []

    def snapshot(self) -> Snapshot | None:
        """The cached reading, refreshed when older than `cache_seconds`.

        The database is asked at most once per `cache_seconds`, also when it fails to
        answer, and a scrape arriving while a reading is under way gets the last one at
        once: `/metrics` needs no credentials, and scrapes queued behind a hung database
        would hold every worker thread of the API (the probes' too).
        """
        if not self._lock.acquire(blocking=False):
            return self._snapshot
        try:
            now = time.monotonic()
            if self._tried_at is not None and now - self._tried_at < self.cache_seconds:
                return self._snapshot
            try:
                with self.sessions() as session:
                    self._limit(session)
                    self._snapshot = read_snapshot(
                        session, self.types(), archiving=self.config.audit.archiving
                    )
            except Exception as err:
                self._errors += 1
                # Scrapes come every few seconds: an outage is a line when it begins (one
                # a minute) and one when it ends; anything else is a bug, with its traceback.
                if is_unavailable(err):
                    self._outage.failed(err)
                else:
                    log.error("cannot read the database gauges", exc_info=err)
            else:
                self._outage.succeeded()
            finally:
                # From the attempt's end: a reading that waited for a hung database
                # until its timeouts is not followed at once by another.
                self._tried_at = time.monotonic()
            return self._snapshot
        finally:
            self._lock.release()

    def _limit(self, session: Session) -> None:
        """Bound the gauge queries by the budget (PostgreSQL's statement timeout), and
        run them without parallel workers: on a long history the planner spreads the
        failed items' count over workers whose start (about 10 ms) costs more than the
        index scans they share (measured in benchmarks/scale.py)."""
        if session.get_bind().dialect.name == "postgresql":
            milliseconds = max(1, math.ceil(self.budget_seconds * 1000))
            session.execute(text(f"SET LOCAL statement_timeout = {milliseconds}"))
            session.execute(text("SET LOCAL max_parallel_workers_per_gather = 0"))

    def collect(self) -> Iterator[Metric]:
        """The gauges of the latest reading, and the reading's own health."""
        p = self.prefix
        snapshot = self.snapshot()
        errors = CounterMetricFamily(
            f"{p}db_metrics_errors",
            "Scrapes whose database gauges could not be read (the last reading is served).",
        )
        errors.add_metric([], self._errors)
        yield errors
        age = GaugeMetricFamily(
            f"{p}db_metrics_age_seconds",
            "Age of the database reading served (cached up to metrics.cache_seconds).",
        )
        if snapshot is not None:
            age.add_metric([], time.monotonic() - snapshot.taken_at)
        yield age
        yield from self._gauges(snapshot)

    def _gauges(self, snapshot: Snapshot | None) -> Iterator[Metric]:
        p = self.prefix
        lanes = ["project", "lane"]
        items = GaugeMetricFamily(
            f"{p}items",
            "Active and failed work items by type, phase and admission state.",
            labels=["type", "phase", "admission"],
        )
        in_flight = GaugeMetricFamily(
            f"{p}pool_in_flight", "Admitted items holding a pool slot.", labels=lanes
        )
        capacity = GaugeMetricFamily(
            f"{p}pool_capacity", "Slots of the pool (configured).", labels=lanes
        )
        queued = GaugeMetricFamily(f"{p}pool_queued", "Items waiting for a slot.", labels=lanes)
        autonomous = GaugeMetricFamily(
            f"{p}pool_queued_autonomous",
            "Queued items that no person or event asked for (schedules, scans).",
            labels=lanes,
        )
        oldest = GaugeMetricFamily(
            f"{p}pool_oldest_queued_age_seconds",
            "How long the longest-waiting queued item has waited.",
            labels=lanes,
        )
        pending = GaugeMetricFamily(f"{p}pending_events", "Stored events not applied yet.")
        alive = GaugeMetricFamily(
            f"{p}replicas_alive", "Daemons whose heartbeat is recent (`wq replicas`)."
        )
        lost = GaugeMetricFamily(
            f"{p}replicas_lost",
            "Daemons whose heartbeat stopped without a clean shutdown (kept an hour).",
        )
        backlog = GaugeMetricFamily(
            f"{p}audit_archive_backlog",
            "Audit entries not archived to S3 yet (only while archival is on).",
        )
        behind = GaugeMetricFamily(
            f"{p}audit_archive_oldest_age_seconds",
            "Age of the oldest audit entry not archived yet, 0 when none waits "
            "(only while archival is on).",
        )
        if snapshot is not None:
            # Ages count from now, not from the reading: they keep growing between readings.
            now = self.clock()
            for (item_type, phase, admission), count in sorted(snapshot.items.items()):
                items.add_metric([item_type, phase, admission], count)
            pools = set(snapshot.in_flight) | set(snapshot.queued)
            self._pools_seen |= {project for project, _ in pools}
            for project in sorted(self._pools_seen):
                pool = self.config.pool_for(project)
                limits = {ALERT_LANE: pool.alert_capacity, NORMAL_LANE: pool.capacity}
                for lane in LANES:
                    key = (project, lane)
                    capacity.add_metric([project, lane], limits[lane])
                    in_flight.add_metric([project, lane], snapshot.in_flight.get(key, 0))
                    queued.add_metric([project, lane], snapshot.queued.get(key, 0))
                    autonomous.add_metric([project, lane], snapshot.queued_autonomous.get(key, 0))
                    since = snapshot.oldest_queued_at.get(key)
                    waited = 0.0 if since is None else (now - since).total_seconds()
                    oldest.add_metric([project, lane], max(0.0, waited))
            pending.add_metric([], snapshot.pending_events)
            alive.add_metric([], snapshot.replicas_alive)
            lost.add_metric([], snapshot.replicas_lost)
            if snapshot.audit_backlog is not None:
                backlog.add_metric([], snapshot.audit_backlog)
                since = snapshot.oldest_unarchived_at
                age = 0.0 if since is None else (now - since).total_seconds()
                behind.add_metric([], max(0.0, age))
        yield from (items, in_flight, capacity, queued, autonomous, oldest, pending)
        yield from (alive, lost, backlog, behind)
