"""One claimed item on one worker: decide, run the executor fenced, record, repeat.

The runner asks the decider, runs the chosen executor under the item's lease fence,
commits, and asks again, until the decider has nothing to do (the item goes idle
and frees its slot), asks to wait (the item keeps its slot and is claimed again
later), the phase becomes terminal, the action fails, or the worker must be given
back (the per-item deadline, or shutdown). Only the thread that holds a lease lets
go of it, and only between actions. An item let go after an action that sent no
statement may wait in its worker's group, to be stored with the worker's other items
in one transaction (`wq.engine.finish_group`).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from wq.engine import leases, on_commit
from wq.engine.actions import ActionDone, ActionRunner
from wq.engine.config import ProcessingConfig
from wq.engine.fence import _IN_EXECUTOR
from wq.engine.finish_group import FinishGroup, GroupRelease, store_together
from wq.engine.item_reads import ItemReads
from wq.engine.models import TERMINAL_PHASES, WorkItem
from wq.engine.registry import (
    Decision,
    TypeRegistry,
    Wait,
)
from wq.engine.releases import release_if_unchanged, release_slot

log = logging.getLogger("wq.engine.processing")

# Items to run alone next time, remembered at most (an item another replica took and
# finished is never run here again to be forgotten).
MAX_ALONE = 10_000


@dataclass(eq=False)
class _Step:
    """One claimed item on its worker: its session, its lease, and the last action."""

    session: Session
    item: WorkItem
    item_id: uuid.UUID  # readable after a failed commit expired the item
    token: str
    actor: str
    started: float
    done: ActionDone | None = None  # the last action, when the item waits in a group
    release: GroupRelease | None = None  # its release, when it waits in a group
    # As its claim loaded it: no statement sent in its session yet.
    as_loaded: bool = False


class ItemRunner:
    """Runs claimed items' actions; shared by all workers of one manager."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        registry: TypeRegistry,
        settings: ProcessingConfig,
        clock: Callable[[], datetime],
        stopping: threading.Event,
    ) -> None:
        self.sessions = sessions
        self.registry = registry
        self.settings = settings
        self.clock = clock
        self._stopping = stopping
        # The action each running item is executing, for the shutdown log.
        self.current: dict[uuid.UUID, str] = {}
        self.reads = ItemReads(registry)
        self.actions = ActionRunner(sessions, registry, settings, clock, self.reads)
        # Items whose group failed to store: the next run of each goes alone.
        self._alone: set[uuid.UUID] = set()

    def new_group(self) -> FinishGroup[_Step]:
        """A group for one worker's items (`run(group=...)`, then `finish`)."""
        return FinishGroup()

    def run(
        self,
        item_id: uuid.UUID,
        token: str,
        actor: str,
        *,
        item: WorkItem | None = None,
        group: FinishGroup[_Step] | None = None,
    ) -> bool:
        """Run one claimed item's actions until it idles, ends, fails or must yield.

        `item` is the item as its claim loaded it (detached); without it, the item is
        read once here, outside any write transaction. An action's writes, the
        next decision, the release and the audit rows then go in one transaction under
        the lease fence (the row is locked until commit on PostgreSQL). The fence finds
        the item's stamp: when it is not the one read, someone changed the item
        meanwhile (an event, an API call), and it is read again and decided anew. So
        an event applied meanwhile is seen, and can never be lost by releasing the
        item to `idle`. An item let go unchanged is released by the fence itself.

        With `group`, an item let go after an action whose writes are only changes to
        its loaded objects is left in the group instead, to be stored and released
        with the others of its worker (`finish`): then it returns True.
        """
        started = time.monotonic()
        if group is not None and item_id in self._alone:
            self._alone.discard(item_id)  # its group failed to store: this time alone
            group = None
        session = self.sessions()
        kept = False  # the group has the session now
        try:
            session.info[_IN_EXECUTOR] = False  # the lease holder's session (no stamps)
            loaded = item is not None
            if item is None:
                item = self.reads.read(session, item_id)
            else:
                session.add(item)  # as loaded: clean, no statement
            if item is None or item.lease_token != token:
                return False
            step = _Step(session, item, item.id, token, actor, started, as_loaded=loaded)
            kept = self._drive(step, self._next_action(item), None, group)
        finally:
            if not kept:
                session.close()
        return kept

    def finish(self, group: FinishGroup[_Step]) -> None:
        """Store the writes of the items a group holds and release them: one transaction.

        The release matches only the items whose lease is still the worker's and that
        nobody changed since they were read; each of the others goes on alone as `run`
        would (the fence, a fresh read, another decision). Should the transaction fail,
        nothing of it is stored: its items are handed back with their slots, to run
        again (executors are idempotent), each alone, so that a write the database
        refuses is counted against the action that made it.
        """
        steps = group.take()
        if len(steps) <= 1:
            for step in steps:
                self._resume(step)
            return
        stored, failure = store_together(self.sessions, steps, now=self.clock())
        if failure is None:
            for step in stored:
                assert step.done is not None
                self.actions.count(
                    step.done.type_name, step.done.action, "succeeded", step.done.started
                )
        elif stored:
            self._hand_back(stored, failure)  # dealt with: not raised
            failure = None
        # The others go on alone; should one fail, the rest still do (the first is raised).
        for step in steps:
            if step not in stored:
                try:
                    self._resume(step)
                except Exception as err:
                    failure = failure or err
        if failure is not None:
            raise failure

    def _resume(self, step: _Step) -> None:
        """Go on with an item a group held, alone: fence, store, decide as `run` does."""
        try:
            step.session.add(step.item)
            self._drive(step, None, step.done, None)
        finally:
            step.session.close()

    def _hand_back(self, steps: list[_Step], err: Exception) -> None:
        """A group's transaction failed: its items keep their slots and run again."""
        log.warning(
            "storing what %d work items' actions wrote failed (%s); they run again, each alone",
            len(steps),
            err,
        )
        if len(self._alone) > MAX_ALONE:  # ids of items other replicas took and ran
            self._alone.clear()
        with self.sessions.begin() as session:
            leases.give_back(
                session, [(step.item_id, step.token) for step in steps], resume_at=self.clock()
            )
        self._alone.update(step.item_id for step in steps)
        for step in steps:
            assert step.done is not None
            self.actions.count(step.done.type_name, step.done.action, "requeued", step.done.started)

    def _drive(
        self,
        step: _Step,
        action: Decision,
        done: ActionDone | None,
        group: FinishGroup[_Step] | None,
    ) -> bool:
        """The loop of `run` from `action` on (`done`: the last action, not yet stored).

        True when the item was left in `group` (with its session).
        """
        session, item, token, actor = step.session, step.item, step.token, step.actor
        item_id = item.id
        locked = False  # is the item locked under our lease, and known fresh?
        while True:
            if not locked and (done is not None or not isinstance(action, str)):
                # Letting go, or storing an action's writes: only under the fence.
                if action is None and done is not None and group is not None:
                    step.done = done
                    step.release = GroupRelease(
                        item, token, actor, self._release_trigger(item, done), done.record
                    )
                    if group.adopt(step):
                        return True
                if action is None and release_if_unchanged(
                    session,
                    item,
                    token=token,
                    actor=actor,
                    trigger=self._release_trigger(item, done),
                    now=self.clock(),
                    records=[done.record] if done is not None and done.record else [],
                ):
                    if done is not None:
                        done.record = None  # written with the release
                    self.actions.fenced(session, done)
                    self._commit(session, item_id, token, done, actor)
                    return False
                changed = self.reads.lock(session, item, token)
                if changed is None:
                    self.actions.lost(item_id, done)
                    return False
                locked = True
                self.actions.fenced(session, done)
                if changed:
                    action = self._next_action(item)
            if action is None:
                trigger = self._release_trigger(item, done)
                release_slot(session, item, actor=actor, trigger=trigger)
                self._commit(session, item_id, token, done, actor)
                return False
            if isinstance(action, Wait):
                self._hold(item, action)
                self._commit(session, item_id, token, done, actor)
                return False
            if self._stopping.is_set():
                # Shutting down: hand the item back between actions. It keeps its
                # slot and its place in line; another replica, told, claims it at once.
                leases.give_back(session, [(item_id, token)])
                self._commit(session, item_id, token, done, actor)
                return False
            if (
                done is not None
                and time.monotonic() - step.started >= self.settings.deadline_seconds
            ):
                # Keep the slot, give the worker back; the item is claimed again
                # behind the items that were already waiting.
                leases.drop_lease(session, item_id, token, resume_at=self.clock())
                self._commit(session, item_id, token, done, actor)
                return False
            # End the transaction (storing the last action's writes): no lock is
            # held, and on SQLite no write lock, while the executor calls out. Before
            # the first action on an item as loaded there is nothing to end (no
            # statement sent, nothing changed), unless its decider changed it.
            untouched = step.as_loaded and not (
                session.new or session.dirty or session.deleted or on_commit.has_entries(session)
            )
            step.as_loaded = False
            if not untouched and not self._commit(session, item_id, token, done, actor):
                return False
            self.current[item_id] = action
            try:
                done = self.actions.run(session, item, token, action, actor)
            finally:
                self.current.pop(item_id, None)
            if done is None:
                return False
            locked = done.fenced
            action = self._next_action(item)

    @staticmethod
    def _release_trigger(item: WorkItem, done: ActionDone | None) -> dict[str, Any]:
        if item.phase not in TERMINAL_PHASES:
            return {"source": "decider", "reason": "nothing to do"}
        if done is not None:
            return {"source": "worker", "action": done.action}
        return {"source": "worker", "reason": "phase is terminal"}

    def _commit(
        self, session: Session, item_id: uuid.UUID, token: str, done: ActionDone | None, actor: str
    ) -> bool:
        """Commit; False when it failed storing an action's writes (counted as its failure)."""
        if done is None:
            session.commit()
            return True
        try:
            session.commit()
        except Exception as err:
            session.rollback()
            self.actions.record_failure(item_id, token, done.action, err, actor)
            return False
        return True

    def _next_action(self, item: WorkItem) -> Decision:
        if item.phase in TERMINAL_PHASES:
            return None
        return self.registry.get(item.type).decider(item, self.clock())

    @staticmethod
    def _hold(item: WorkItem, wait: Wait) -> None:
        """Keep the item's slot and give the worker back until `wait.until`.

        The caller holds the lease fence in the open transaction and commits. No audit
        row: a long run is checked many times and nothing about the item changes.
        """
        item.run_after = wait.until
        item.lease_owner = item.lease_token = None
        item.leased_until = None
