"""Wake-ups: tell the scheduler about new work as soon as it is committed.

Code that creates work calls `signal(session, ...)` inside its transaction. On
PostgreSQL that also issues a `NOTIFY`, which the database delivers to every replica
on commit; in-process, the session's `Wakeup` hub is poked after the commit. Nothing
is signalled for a transaction that rolls back.

Work that becomes due later (an item put back in the queue until its backoff ends)
calls `signal_later`: after the commit, the session's own hub delivers the signal when
the time comes. Other replicas are not told; they find the item at their next poll,
and so does this one's if the process ends first.
"""

from __future__ import annotations

import heapq
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

from sqlalchemy import event
from sqlalchemy.orm import Session, SessionTransaction

from wq.engine import on_commit, store

WAKEUP_KEY = "wq_wakeup"
QUIET_KEY = "wq_wakeup_quiet"

PROJECT_QUEUED = "queued"
ITEMS_ADMITTED = "admitted"
EVENT_STORED = "event"
NO_HUB = "-"  # the origin of NOTIFYs from sessions without a hub: nobody skips them

# One NOTIFY carries every subject of a kind a transaction signals, one per line
# (`kind:subject\nsubject...`): a release of a worker's group frees slots in dozens of
# projects, and each replica's listener would otherwise wake once per project. A
# payload's subjects go on in the next NOTIFY once this many bytes have gone: subjects
# (projects of at most 512 characters without whitespace, item ids) take 2,048 bytes
# at most, so a payload stays under PostgreSQL's limit of 8,000.
SUBJECT_SEPARATOR = "\n"
NOTIFY_CHUNK_BYTES = 5000


@dataclass
class Pending:
    """What a scheduler pass should look at, gathered from signals since the last one."""

    projects: set[str] = field(default_factory=set)
    event_items: set[uuid.UUID] = field(default_factory=set)
    claim: bool = False
    resync: bool = False  # admit every project: wake-ups may have been missed

    def __bool__(self) -> bool:
        return bool(self.projects or self.event_items or self.claim or self.resync)

    def events_only(self) -> bool:
        """Whether stored events are all there is to look at."""
        return bool(self.event_items) and not (self.projects or self.claim or self.resync)

    def add(self, other: Pending) -> None:
        """Take in what `other` holds too."""
        self.projects |= other.projects
        self.event_items |= other.event_items
        self.claim = self.claim or other.claim
        self.resync = self.resync or other.resync


class Wakeup:
    """A hub that gathers signals and wakes the thread waiting on it.

    Each hub has its own `origin`: NOTIFYs sent from its sessions carry it, so its own
    listener skips them (the hub already has them) while every other hub, in another
    process or in this one, receives them.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._pending = Pending()
        self._later: list[tuple[float, str, str]] = []  # a heap of (due, kind, subject)
        self.origin = uuid.uuid4().hex[:12]

    def deliver(self, kind: str, subject: str) -> None:
        """Record one signal (from this process or a NOTIFY) and wake the waiter."""
        with self._cond:
            if self._record(kind, subject):
                self._cond.notify_all()

    def deliver_later(self, kind: str, subject: str, seconds: float) -> None:
        """Deliver a signal `seconds` from now (the waiter wakes for it then)."""
        with self._cond:
            heapq.heappush(self._later, (time.monotonic() + seconds, kind, subject))
            self._cond.notify_all()  # to wait no longer than until it is due

    def _record(self, kind: str, subject: str) -> bool:
        """Add a signal to what is pending (the lock held); False if it is not one."""
        if kind == PROJECT_QUEUED:
            self._pending.projects.add(subject)
        elif kind == EVENT_STORED:
            try:
                self._pending.event_items.add(uuid.UUID(subject))
            except ValueError:
                return False
        elif kind == ITEMS_ADMITTED:
            self._pending.claim = True
        else:
            return False
        return True

    def deliver_payload(self, *payloads: str) -> None:
        """Record NOTIFY payloads: `kind:subject`, one subject a line (`payloads_of`)."""
        with self._cond:
            recorded = False
            for payload in payloads:
                kind, _, subjects = payload.partition(":")
                for part in subjects.split(SUBJECT_SEPARATOR):
                    recorded = self._record(kind, part) or recorded
            if recorded:
                self._cond.notify_all()

    def poke(self) -> None:
        """Wake the waiter with nothing specific to do (a slot may be free)."""
        self.deliver(ITEMS_ADMITTED, "")

    def resync(self) -> None:
        """Wake the waiter for a full admission pass (signals may have been lost)."""
        with self._cond:
            self._pending.resync = True
            self._cond.notify_all()

    def wait(self, timeout: float) -> Pending:
        """Block until something is signalled (or a later signal is due) or the timeout
        passes; take what was signalled."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                now = time.monotonic()
                while self._later and self._later[0][0] <= now:
                    _, kind, subject = heapq.heappop(self._later)
                    self._record(kind, subject)
                if self._pending or now >= deadline:
                    break
                due = self._later[0][0] if self._later else deadline
                self._cond.wait(min(deadline, due) - now)
            taken, self._pending = self._pending, Pending()
            return taken


def quiet(session: Session, kind: str) -> None:
    """This transaction's commit does not wake its own hub for `kind`: the caller acts
    on it itself. Other replicas are still notified."""
    if session.get_transaction() is None:
        session.begin()  # the mark ends with this transaction
    session.info.setdefault(QUIET_KEY, set()).add(kind)


@event.listens_for(Session, "after_transaction_end")
def _end_quiet(session: Session, transaction: SessionTransaction) -> None:
    if transaction.parent is None:
        session.info.pop(QUIET_KEY, None)


def signal(session: Session, kind: str, subject: str = "") -> None:
    """Announce work from inside a transaction; delivered only if it commits."""
    if not on_commit.is_pending(session, "signal", (kind, subject)):
        on_commit.defer(session, "signal", (kind, subject))


def signal_later(session: Session, kind: str, subject: str, seconds: float) -> None:
    """Announce work that becomes due `seconds` after this transaction commits, to this
    process's scheduler only (see the module docstring)."""
    on_commit.defer(session, "signal_later", (kind, subject, seconds))


@on_commit.handler("signal_later")
def _deliver_later(session: Session, signals: list[tuple[str, str, float]]) -> None:
    hub = session.info.get(WAKEUP_KEY)
    if isinstance(hub, Wakeup):
        for kind, subject, seconds in signals:
            hub.deliver_later(kind, subject, seconds)


def payloads_of(signals: Iterable[tuple[str, str]]) -> list[str]:
    """NOTIFY payloads (without their origin) for (kind, subject) signals: one a kind,
    its subjects one a line, more than one where they pass `NOTIFY_CHUNK_BYTES`."""
    subjects: dict[str, dict[str, None]] = {}  # kind -> its subjects, in order, once
    for kind, subject in signals:
        subjects.setdefault(kind, {})[subject] = None
    payloads = []
    for kind, of_kind in subjects.items():
        chunks: dict[int, list[str]] = {}
        sent = 0
        for subject in of_kind:
            sent += len(subject.encode()) + 1
            chunks.setdefault(sent // NOTIFY_CHUNK_BYTES, []).append(subject)
        payloads += [f"{kind}:{SUBJECT_SEPARATOR.join(chunk)}" for chunk in chunks.values()]
    return payloads


@on_commit.before("signal")
def _notify_replicas(session: Session, signals: list[tuple[str, str]]) -> None:
    hub = session.info.get(WAKEUP_KEY)
    origin = hub.origin if isinstance(hub, Wakeup) else NO_HUB
    store.notify(session, payloads_of(signals), origin)


@on_commit.handler("signal")
def deliver_committed(session: Session, signals: list[tuple[str, str]]) -> None:
    """Deliver committed signals to the session's own hub (the NOTIFY went to the rest)."""
    hub = session.info.get(WAKEUP_KEY)
    if isinstance(hub, Wakeup):
        quiet_kinds = session.info.get(QUIET_KEY, ())
        for kind, subject in signals:
            if kind not in quiet_kinds:
                hub.deliver(kind, subject)
