"""Items a worker let go of, stored and released together in one transaction.

A worker that runs several claimed items one after another (`wq.engine.handoff`)
does not commit each item's last action on its own: when that action's writes are
only changes to the item's loaded objects (no statement sent, nothing deferred to the
commit), the item waits in the worker's `FinishGroup`, and the runner
(`wq.engine.runner.ItemRunner.finish`) stores the group in one transaction: one
statement releases every item of it under its lease fence (token and stamp, as
`wq.engine.releases.release_if_unchanged` does for one) and writes their audit rows and
wake-ups, then what their actions changed is written (on PostgreSQL read off the
objects, `wq.engine.group_writes`; else by one flush), then one commit. An item
the statement does not release (its lease lost, or changed meanwhile) goes on alone.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, Protocol, TypeVar

from sqlalchemy.orm import Session, sessionmaker

from wq.engine import on_commit
from wq.engine.audit import AuditRecord
from wq.engine.group_writes import GroupWrites
from wq.engine.models import ADMITTED, EXECUTOR_SESSION, WorkItem
from wq.engine.release_statements import FencedRelease, release_fenced
from wq.engine.releases import (
    AUDIT_WRITTEN,
    SIGNAL_SENT,
    mark_released,
    release_if_unchanged,
    release_record,
    released_admission,
    snapshot,
)
from wq.engine.store import is_postgres
from wq.engine.wakeup import PROJECT_QUEUED

# How long the first item of a group may wait for the others before the group is
# stored: the most a fast action's item is held back; a slow action ends a group early.
GROUP_SECONDS = 0.05


@dataclass
class GroupRelease:
    """One item to release with its group: its lease, why, and its last action's row."""

    item: WorkItem
    token: str
    actor: str
    trigger: dict[str, Any]
    record: AuditRecord | None


class Finishing(Protocol):
    """What a group holds of an item: its session (no statement sent), the item (its
    id apart: readable once a failed commit expired it), and how to release it."""

    session: Session
    item: WorkItem
    item_id: uuid.UUID
    token: str
    release: GroupRelease | None


Step = TypeVar("Step", bound=Finishing)


class FinishGroup(Generic[Step]):
    """The items one worker thread left to be stored together (used by that thread only)."""

    def __init__(self, seconds: float = GROUP_SECONDS) -> None:
        self._seconds = seconds
        self._steps: list[Step] = []
        self._since: float | None = None

    def adopt(self, step: Step) -> bool:
        """Take an item whose last action sent no statement and changed only its loaded
        objects; False (and nothing taken) when its session holds anything else: other
        objects' changes, audit rows or wake-ups left for the commit."""
        session = step.session
        if on_commit.has_entries(session):
            return False
        # The item stays in its session (which sends nothing more) until it is stored.
        item = step.item
        own = {id(row) for row in item.__dict__.get("statuses") or ()}
        for obj in (*session.new, *session.dirty, *session.deleted):
            if obj is not item and id(obj) not in own:
                return False  # the action changed more than its item's objects
        self._steps.append(step)
        if self._since is None:
            self._since = time.monotonic()
        return True

    def due(self) -> bool:
        """Whether the group's first item has waited long enough."""
        return self._since is not None and time.monotonic() - self._since >= self._seconds

    def held(self) -> list[tuple[uuid.UUID, str]]:
        """The items held: each one's id and lease token."""
        return [(step.item_id, step.token) for step in self._steps]

    def take(self) -> list[Step]:
        """The items held, removed from the group."""
        steps, self._steps, self._since = self._steps, [], None
        return steps


def store_together(
    sessions: sessionmaker[Session], steps: Sequence[Step], *, now: datetime
) -> tuple[list[Step], Exception | None]:
    """Release the items of `steps` and store their writes in one transaction.

    Returns the steps whose items it released and stored (none when it failed), and
    the failure. The others (lease lost, changed meanwhile) are left as they were, in
    their own sessions. The stored steps' sessions are closed.
    """
    stored: list[Step] = []
    try:
        with sessions() as session:
            session.info[EXECUTOR_SESSION] = False  # the lease holder's: no stamps
            releases = [step.release for step in steps if step.release is not None]
            released = release_group(session, releases, now=now)
            stored = [step for step in steps if step.item_id in released]
            writes = GroupWrites() if is_postgres(session) else None
            for step in stored:
                if writes is None or not writes.add(step.item):
                    # Its writes, flushed with the others' (its dimensions and detail
                    # rows move with it, changes kept).
                    step.session.expunge(step.item)
                    session.add(step.item)
            if writes is not None:
                writes.write(session.connection())
            session.commit()
    except Exception as err:
        return _closed(stored), err
    return _closed(stored), None


def _closed(steps: list[Step]) -> list[Step]:
    for step in steps:
        step.session.close()
    return steps


def release_group(
    session: Session, releases: Sequence[GroupRelease], *, now: datetime
) -> set[uuid.UUID]:
    """Release the items whose lease and stamp are still as read; return their ids.

    Their audit rows (the last action's, then the release's) and the wake-ups of their
    projects go with the release. The released items' loaded state is set as written.
    The caller adds them to `session` (their own changes are flushed with it) and
    commits. On SQLite each item has its statement (one writer, no round trips to save).
    """
    if not is_postgres(session):
        return {
            release.item.id
            for release in releases
            if release_if_unchanged(
                session,
                release.item,
                token=release.token,
                actor=release.actor,
                trigger=release.trigger,
                now=now,
                records=[release.record] if release.record else [],
            )
        }
    asked: list[tuple[GroupRelease, FencedRelease]] = []
    for release in releases:
        new_admission = released_admission(release.item)
        if new_admission is None:
            continue
        item = release.item
        old = snapshot(item)
        held_slot = old["admission"] == ADMITTED
        released = release_record(old, item.id, new_admission, release.actor, release.trigger)
        rows = [record.row() for record in (release.record, released) if record]
        signals = [(PROJECT_QUEUED, item.project)] if held_slot else []
        fenced = FencedRelease(item.id, release.token, item.stamp, new_admission, rows, signals)
        asked.append((release, fenced))
    done = release_fenced(session, [fenced for _, fenced in asked], now=now)
    for release, fenced in asked:
        if release.item.id not in done:
            continue
        mark_released(release.item, fenced.new_admission, now)
        for row in fenced.rows:
            on_commit.defer(session, AUDIT_WRITTEN, row)
        signal = (PROJECT_QUEUED, release.item.project)
        if fenced.signals and not on_commit.is_pending(session, SIGNAL_SENT, signal):
            on_commit.defer(session, SIGNAL_SENT, signal)
    return done
