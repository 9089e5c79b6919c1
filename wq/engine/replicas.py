"""Replicas: each daemon's row in `replicas`, written on a heartbeat and removed when
it stops cleanly, and the list every replica reads (alive, or lost when its heartbeat
is older than three of its intervals, with the leases the others are rescuing).

Rows of replicas lost long ago are removed by the heartbeat of the living, so that a
deployment whose pods come and go keeps a short table.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Select, delete, func, or_, select, text, update
from sqlalchemy.orm import Session, sessionmaker

import wq
from wq.engine.models import ADMITTED, Replica, WorkItem, utcnow
from wq.engine.outage import describe, is_unavailable
from wq.engine.store import inline

log = logging.getLogger("wq.engine")

# A replica is lost when its heartbeat is older than this many of its intervals.
LOST_AFTER_BEATS = 3
# A lost replica's row is kept this long (then it is history: its leases were rescued).
LOST_KEPT = timedelta(hours=1)


@dataclass(frozen=True)
class ReplicaReport:
    """What a replica says of itself at each heartbeat."""

    workers_busy: int
    workers_total: int
    consumes_events: bool
    last_event_at: datetime | None


@dataclass(frozen=True)
class ReplicaView:
    """A replica as `GET /api/replicas` shows it."""

    row: Replica
    alive: bool
    heartbeat_age_seconds: float
    being_rescued: int  # a lost replica's leases not taken over yet


def is_alive(heartbeat_at: datetime, heartbeat_seconds: float, now: datetime) -> bool:
    """Whether a heartbeat is recent enough: within three of the replica's intervals."""
    return heartbeat_at >= now - timedelta(seconds=LOST_AFTER_BEATS * heartbeat_seconds)


def count_alive(session: Session, now: datetime) -> tuple[int, int]:
    """(alive, lost) replicas, by each one's own heartbeat interval."""
    alive = lost = 0
    for heartbeat_at, seconds in session.execute(
        select(Replica.heartbeat_at, Replica.heartbeat_seconds)
    ):
        if is_alive(heartbeat_at, seconds, now):
            alive += 1
        else:
            lost += 1
    return alive, lost


def _leases_of(replica_id: str) -> Select[int]:
    """Items leased by a replica (its workers are `<id>/worker-N`), among the admitted
    items (only they hold leases)."""
    return select(func.count()).where(
        WorkItem.admission == inline(ADMITTED),
        or_(
            WorkItem.lease_owner == replica_id,
            # Escaped: a host name's `_` is no wildcard matching another replica's workers.
            WorkItem.lease_owner.startswith(f"{replica_id}/", autoescape=True),
        ),
        WorkItem.leased_until.is_not(None),
    )


def list_replicas(session: Session, now: datetime) -> list[ReplicaView]:
    """Every replica with a row, alive ones first, then by id."""
    views = []
    for row in session.scalars(select(Replica)):
        alive = is_alive(row.heartbeat_at, row.heartbeat_seconds, now)
        rescued = 0 if alive else int(session.execute(_leases_of(row.id)).scalar_one())
        age = max(0.0, (now - row.heartbeat_at).total_seconds())
        views.append(ReplicaView(row, alive, age, rescued))
    views.sort(key=lambda view: (not view.alive, view.row.id))
    return views


class ReplicaHeartbeat:
    """Writes this daemon's row every `interval` seconds on a thread of its own."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        replica_id: str,
        report: Callable[[], ReplicaReport],
        *,
        interval: float,
        clock: Callable[[], datetime] = utcnow,
        probe_sessions: sessionmaker[Session] | None = None,
    ) -> None:
        self.sessions = sessions
        # The round trip is timed on a read session: a write transaction's first
        # statement on SQLite waits for the write lock, which is not the database's speed.
        self.probe_sessions = probe_sessions or sessions
        self.replica_id = replica_id
        self.report = report
        self.interval = interval
        self.clock = clock
        self.started_at = clock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing = False

    def start(self) -> None:
        """Write the row now, then on every interval."""
        self._thread = threading.Thread(target=self._run, name="wq-replica", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        """Stop beating and remove the row: a clean shutdown is not a lost replica."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout)
        try:
            with self.sessions.begin() as session:
                session.execute(delete(Replica).where(Replica.id == self.replica_id))
        except Exception as err:  # the row will show as lost, then go
            log.warning("could not remove this replica's row: %s", describe(err))

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.beat()
            except Exception as err:
                if not self._failing:
                    how = "" if is_unavailable(err) else " (a bug?)"
                    log.warning("replica heartbeat failed%s: %s", how, describe(err))
                self._failing = True
            else:
                if self._failing:
                    log.info("replica heartbeat written again")
                self._failing = False
            self._stop.wait(self.interval)

    def beat(self) -> None:
        """Write this replica's row (insert or update) and drop long-lost ones."""
        report = self.report()
        with self.probe_sessions() as probe:
            started = time.perf_counter()
            probe.execute(text("SELECT 1"))
            round_trip_ms = (time.perf_counter() - started) * 1000
        with self.sessions.begin() as session:
            now = self.clock()
            values = {
                "heartbeat_at": now,
                "heartbeat_seconds": self.interval,
                "workers_busy": report.workers_busy,
                "workers_total": report.workers_total,
                "leases_held": int(
                    session.execute(
                        _leases_of(self.replica_id).where(WorkItem.leased_until > now)
                    ).scalar_one()
                ),
                "consumes_events": report.consumes_events,
                "last_event_at": report.last_event_at,
                "db_round_trip_ms": round(round_trip_ms, 3),
            }
            updated = session.execute(
                update(Replica).where(Replica.id == self.replica_id).values(**values)
            )
            if not updated.rowcount:  # type: ignore[attr-defined]
                host, _, pid = self.replica_id.rpartition(":")
                session.add(
                    Replica(
                        id=self.replica_id,
                        host=host or socket.gethostname(),
                        pid=int(pid) if pid.isdigit() else os.getpid(),
                        version=wq.__version__,
                        started_at=self.started_at,
                        **values,
                    )
                )
            session.execute(delete(Replica).where(Replica.heartbeat_at < now - LOST_KEPT))
