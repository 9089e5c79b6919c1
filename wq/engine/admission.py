"""The admission dispatcher: per-project pools, strict FIFO by seq, reserved alert lane.

Each project has a normal pool of capacity N and an alert pool of capacity M that
normal work never uses. A pass admits, for all signalled projects at once and under
one admission lock, the heads of every lane in `seq` order up to its free slots, and
on PostgreSQL at most about `ADMISSIONS_PER_PASS` items in all (the next pass admits
the rest).
In-flight counts are read from the database on every pass, never carried over, so a
crash or a second replica cannot leak or double-count a slot.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Select, func, select
from sqlalchemy.orm import Session, sessionmaker

from wq.engine import admission_statements, on_commit, store
from wq.engine.audit import AuditRecord, audit
from wq.engine.config import Config
from wq.engine.metrics import Metrics, after_commit
from wq.engine.models import ADMITTED, ALERT_LANE, NORMAL_LANE, QUEUED, WorkItem
from wq.engine.releases import AUDIT_WRITTEN
from wq.engine.store import inline
from wq.engine.wakeup import ITEMS_ADMITTED, quiet, signal

DISPATCHER = "dispatcher"
# A project's queue held up this long by a row another transaction holds is logged.
HELD_WARNING_SECONDS = 10.0
# About how many items one pass admits at most on PostgreSQL, shared evenly among its
# projects (each of a project's lanes takes at most its share). A large backlog, at
# start or when a pool grows, is then admitted by a pass after another, its first items
# claimed while the next are admitted, instead of by one long transaction that holds
# the admission lock and keeps every item waiting: a 10,000-item backlog took one pass
# of about 450 ms (benchmarks/README.md). SQLite admits every free slot in one pass.
ADMISSIONS_PER_PASS = 500

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Admitted:
    """One item admitted by a pass."""

    id: uuid.UUID
    project: str
    lane: str
    seq: int
    waited: float | None = None  # seconds from queued_at to admission (None: not queued)


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


def in_flight(session: Session, project: str) -> dict[str, int]:
    """Admitted items of a project per lane, counted now."""
    rows = session.execute(
        select(WorkItem.lane, func.count())
        .where(WorkItem.project == project, WorkItem.admission == inline(ADMITTED))
        .group_by(WorkItem.lane)
    )
    return {lane: int(count) for lane, count in rows}


def _capacities(config: Config, projects: Iterable[str]) -> list[tuple[str, str, int]]:
    """(project, lane, capacity) of every lane to look at, alert lanes first."""
    lanes: list[tuple[str, str, int]] = []
    for project in sorted(set(projects)):
        pool = config.pool_for(project)
        lanes.append((project, ALERT_LANE, pool.alert_capacity))
        lanes.append((project, NORMAL_LANE, pool.capacity))
    return [lane for lane in lanes if lane[2] > 0]


_LANE_ORDER = {ALERT_LANE: 0, NORMAL_LANE: 1}


def _lane_projects(lanes: list[tuple[str, str, int]]) -> list[str]:
    return sorted({project for project, _, _ in lanes})


def lane_share(lanes: list[tuple[str, str, int]]) -> int:
    """How many items each lane of a pass admits at most: its project's even share of
    `ADMISSIONS_PER_PASS`."""
    return max(1, -(-ADMISSIONS_PER_PASS // len(_lane_projects(lanes))))


def admit(
    session: Session,
    config: Config,
    projects: Iterable[str],
    clock: Callable[[], datetime],
    *,
    held: set[str] | None = None,
    more: set[str] | None = None,
) -> list[Admitted]:
    """Admit the heads of the given projects' lanes into their free slots (caller commits).

    One set-based statement for all lanes (`admission_statements.admit_heads`), serialised across
    replicas by one admission lock per pass; audit rows in FIFO order per lane. The
    pass's time is read from `clock` once it holds the lock: read before, a pass that
    waited for another replica's would stamp its admissions (later seqs) earlier than
    that replica's. A lane whose head another transaction has locked admits nothing
    this time; its project is added to `held`, to be looked at again. On PostgreSQL each
    lane admits at most its share of the pass (`lane_share`); a project with a lane that
    took its whole share is added to `more`: more may be queued there.
    """
    lanes = _capacities(config, projects)
    if not lanes:
        return []
    if not admission_statements.lock_admission(session, _lane_projects(lanes)):
        return []
    now = clock()
    # SQLite: one pass for every free slot. Its one writer lets nothing overlap a pass,
    # so passes in a row would only add their own cost.
    most = lane_share(lanes) if store.is_postgres(session) else None
    rows, held_lanes, audited = admission_statements.admit_heads(
        session, lanes, now, actor=DISPATCHER, trigger=ADMISSION_TRIGGER, most=most
    )
    if held is not None:
        held.update(project for project, _ in held_lanes)
    if more is not None and most is not None:
        per_lane = Counter((row.project, row.lane) for row in rows)
        more.update(project for (project, _), count in per_lane.items() if count >= most)
    # RETURNING has no order: sort, so the audit trail lists admissions in FIFO order.
    admitted = sorted(
        (
            Admitted(row.id, row.project, row.lane, int(row.seq or 0), _waited(row.queued_at, now))
            for row in rows
        ),
        key=lambda entry: (entry.project, _LANE_ORDER.get(entry.lane, 2), entry.seq),
    )
    if admitted:
        records = [admission_record(entry, now) for entry in admitted]
        if audited:  # written by the statement: logged (and archived) once committed
            for record in records:
                on_commit.defer(session, AUDIT_WRITTEN, record.row())
        else:
            audit(session, *records)
        signal(session, ITEMS_ADMITTED)
        after_commit(session, lambda metrics: _observe_waits(metrics, admitted))
    return admitted


ADMISSION_TRIGGER = {"source": "dispatcher", "reason": "slot free"}


def admission_record(entry: Admitted, now: datetime) -> AuditRecord:
    """The audit row of one admission (`admission_statements.admit_heads` writes the same on
    PostgreSQL)."""
    return AuditRecord(
        "admitted",
        DISPATCHER,
        entry.id,
        old_state={
            "admission": QUEUED,
            "lane": entry.lane,
            "seq": entry.seq,
            "project": entry.project,
        },
        new_state={
            "admission": ADMITTED,
            "lane": entry.lane,
            "seq": entry.seq,
            "project": entry.project,
        },
        trigger=dict(ADMISSION_TRIGGER),
        # The wait goes with the row: the stats read it from here, not by joining every
        # admission of their window to its item.
        metadata=None if entry.waited is None else {"queued_seconds": entry.waited},
        at=now,
    )


class HeldProjects:
    """Projects whose last pass found a queue head locked by another transaction: the
    scheduler looks at them again soon (the lock's end wakes nobody), and warns once
    when one has waited `warn_after` seconds (a transaction left open, most likely)."""

    def __init__(self, warn_after: float | None = None) -> None:
        self.projects: set[str] = set()
        self._warn_after = HELD_WARNING_SECONDS if warn_after is None else warn_after
        self._since: dict[str, float] = {}  # held since (monotonic), while held
        self._warned: set[str] = set()

    def take(self) -> set[str]:
        """The projects to look at again, no longer held until a pass says so."""
        projects, self.projects = self.projects, set()
        return projects

    def passed(self, looked_at: set[str] | None, held: set[str]) -> None:
        """A pass over `looked_at` (None: every project) found `held` held up."""
        now = time.monotonic()
        self.projects |= held
        for project in list(self._since):
            if project not in self.projects and (looked_at is None or project in looked_at):
                del self._since[project]
                self._warned.discard(project)
        for project in held:
            since = self._since.setdefault(project, now)
            if now - since >= self._warn_after and project not in self._warned:
                self._warned.add(project)
                log.warning(
                    "admission in %s has waited %.0f s for a queued item that another "
                    "transaction holds locked; the project's queue moves once it ends",
                    project,
                    now - since,
                )


def _waited(queued_at: datetime | None, now: datetime) -> float | None:
    return None if queued_at is None else max(0.0, (now - queued_at).total_seconds())


def _observe_waits(metrics: Metrics, admitted: list[Admitted]) -> None:
    by_lane = {lane: metrics.admission_wait.labels(lane) for lane in {a.lane for a in admitted}}
    for entry in admitted:
        by_lane[entry.lane].observe(entry.waited or 0.0)


def dispatch(
    sessions: sessionmaker[Session],
    config: Config,
    projects: Iterable[str] | None = None,
    *,
    clock: Callable[[], datetime],
    wake_self: bool = True,
    held: set[str] | None = None,
) -> list[Admitted]:
    """One admission pass over the given projects (all with queued work when None), at
    the time `clock` tells once the pass holds the admission lock.

    One short transaction for the whole pass, whatever the number of projects; it
    never waits for a row another transaction holds (see `admit`: such projects go to
    `held`), and admits about `ADMISSIONS_PER_PASS` items at most (PostgreSQL).
    `wake_self=False`: the caller claims what it admits at once, so its own scheduler is
    not woken for them (other replicas are).
    """
    admission = AdmissionPass(
        config, projects, clock=clock, held=set() if held is None else held, wake_self=wake_self
    )
    with sessions.begin() as session:
        return admission.run(session)


class AdmissionPass:
    """An admission pass in the caller's transaction (the caller commits): the admitter's
    own, or the scheduler's claim's, which then claims what it admitted.

    `wake_self=False` (the scheduler's): what it admits does
    not wake this replica's own scheduler, which claims it at once (other replicas are
    told). `more`: the projects where it admitted a lane's whole share, for the next
    pass to look at again.
    """

    def __init__(
        self,
        config: Config,
        projects: Iterable[str] | None,
        *,
        clock: Callable[[], datetime],
        held: set[str],
        wake_self: bool = False,
    ) -> None:
        self.config = config
        self.wake_self = wake_self
        self.projects = None if projects is None else sorted(set(projects))
        self.clock = clock
        self.held = held
        self.admitted: list[Admitted] = []
        self.more: set[str] = set()

    def run(self, session: Session) -> list[Admitted]:
        """Admit: lock, then the heads of the lanes."""
        if not self.wake_self:
            quiet(session, ITEMS_ADMITTED)
        projects = projects_with_queued(session) if self.projects is None else self.projects
        self.admitted = admit(
            session,
            self.config,
            projects,
            self.clock,
            held=self.held,
            more=self.more,
        )
        return self.admitted
