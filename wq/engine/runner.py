"""One claimed item on one worker: decide, run the executor fenced, record, repeat.

The runner asks the decider, runs the chosen executor under the item's lease fence,
commits, and asks again, until the decider has nothing to do (the item goes idle
and frees its slot), asks to wait (the item keeps its slot and is claimed again
later), the phase becomes terminal, the action fails, or the worker must be given
back (the per-item deadline, or shutdown). Only the thread that holds a lease lets
go of it, and only between actions.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from wq.engine import store
from wq.engine.audit import AuditRecord, audit
from wq.engine.config import ProcessingConfig
from wq.engine.fence import LeaseLost, fenced_executor
from wq.engine.items import release_slot, set_phase, snapshot
from wq.engine.metrics import metrics_of
from wq.engine.models import FAILED, QUEUED, TERMINAL_PHASES, WorkItem
from wq.engine.registry import (
    ActionContext,
    Decision,
    PermanentFailure,
    Requeue,
    RetryLater,
    TypeRegistry,
    Wait,
)
from wq.engine.wakeup import PROJECT_QUEUED, signal

log = logging.getLogger("wq.engine.processing")


def backoff_delay(attempts: int, base: float, maximum: float) -> float:
    """Seconds to wait before retrying after the given number of failed attempts."""
    return float(min(maximum, base * 2 ** max(0, attempts - 1)))


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
        self.metrics = metrics_of(sessions)
        # The action each running item is executing, for the shutdown log.
        self.current: dict[uuid.UUID, str] = {}

    def run(self, item_id: uuid.UUID, token: str, actor: str) -> None:
        """Run one claimed item's actions until it idles, ends, fails or must yield.

        Before the item is let go, the decider is asked with the item re-read under the
        lease fence (the row is locked until commit on PostgreSQL), so an event applied
        meanwhile is seen and can never be lost by releasing the item to `idle`.
        """
        started = time.monotonic()
        with self.sessions() as session:
            item = session.get(WorkItem, item_id)
            if item is None or item.lease_token != token:
                return
            action = self._next_action(item)
            fenced = False  # is the item fresh and locked under our lease right now?
            while True:
                if not isinstance(action, str) and not fenced:
                    # Confirm under the fence with fresh state before letting go.
                    if not store.fence_lease(session, item_id, token, self.clock()):
                        return
                    session.get(WorkItem, item_id, populate_existing=True)
                    action = self._next_action(item)
                if action is None:
                    terminal = item.phase in TERMINAL_PHASES
                    trigger = (
                        {"source": "worker", "reason": "phase is terminal"}
                        if terminal
                        else {"source": "decider", "reason": "nothing to do"}
                    )
                    self._let_go(session, item, actor, trigger)
                    return
                if isinstance(action, Wait):
                    self._hold(session, item, action)
                    return
                if self._stopping.is_set():
                    # Shutting down: hand the item back between actions. It keeps its
                    # slot and its place in line; another replica claims it at once.
                    store.drop_lease(session, item_id, token)
                    session.commit()
                    return
                if fenced and time.monotonic() - started >= self.settings.deadline_seconds:
                    # Keep the slot, give the worker back; the item is claimed again
                    # behind the items that were already waiting.
                    store.drop_lease(session, item_id, token, resume_at=self.clock())
                    session.commit()
                    return
                # End the transaction: on SQLite the write lock is then taken only when
                # the executor first touches the database, not for its whole run.
                session.commit()
                self.current[item_id] = action
                try:
                    if not self._run_action(session, item, token, action, actor):
                        return
                finally:
                    self.current.pop(item_id, None)
                # The item was re-read under the fence: decide on fresh state.
                fenced = True
                action = self._next_action(item)

    def _let_go(
        self, session: Session, item: WorkItem, actor: str, trigger: dict[str, Any]
    ) -> None:
        """Release the item's slot (idle, or done once terminal) and commit, under the fence."""
        release_slot(session, item, actor=actor, trigger=trigger)
        session.commit()

    def _next_action(self, item: WorkItem) -> Decision:
        if item.phase in TERMINAL_PHASES:
            return None
        return self.registry.get(item.type).decider(item, self.clock())

    @staticmethod
    def _hold(session: Session, item: WorkItem, wait: Wait) -> None:
        """Keep the item's slot and give the worker back until `wait.until`.

        The caller holds the lease fence in the open transaction. No audit row: a
        long run is checked many times and nothing about the item changes.
        """
        item.run_after = wait.until
        item.lease_owner = item.lease_token = None
        item.leased_until = None
        session.commit()

    def _run_action(
        self, session: Session, item: WorkItem, token: str, action: str, actor: str
    ) -> bool:
        """Run one executor and stage its changes, fenced; False when the item is let go.

        On success the transaction is left open with the item re-read under the
        fence, so the caller can decide (and release) in the same transaction.
        """
        item_id = item.id
        item_type = self.registry.get(item.type)
        executor = self.registry.executor(item.type, action)
        old = snapshot(item)
        failures, failure_message = item.attempts, item.error
        started = time.monotonic()
        try:
            with fenced_executor(session, item_id, token):
                executor(ActionContext(session, item, self.clock(), item_type.settings, actor))
                session.connection()  # make sure the fenced write transaction has begun
                session.flush()
        except LeaseLost:
            session.rollback()
            self._count_run(item_type.name, action, "lease_lost", started)
            log.warning("lost the lease of work item %s during %s; discarded", item_id, action)
            return False
        except Exception as err:
            session.rollback()
            outcome = "requeued" if isinstance(err, Requeue) else "error"
            self._count_run(item_type.name, action, outcome, started)
            self._record_failure(item_id, token, action, err, actor)
            return False
        self._count_run(item_type.name, action, "succeeded", started)
        if failures:
            # A success ends the run of failures: the limit counts consecutive ones.
            item.attempts = 0
            if item.error == failure_message:  # unless the executor set an error of its own
                item.error = None
        trigger = {"source": "worker", "action": action}
        audit(
            session,
            AuditRecord(
                "action_completed",
                actor,
                item_id,
                old_state=old,
                new_state=snapshot(item),
                trigger=trigger,
            ),
        )
        if item.phase in TERMINAL_PHASES:
            self._let_go(session, item, actor, trigger)
            return False
        session.get(WorkItem, item_id, populate_existing=True)
        return True

    def _count_run(self, type_name: str, action: str, outcome: str, started: float) -> None:
        self.metrics.count_run(type_name, action, outcome, time.monotonic() - started)

    def _record_failure(
        self, item_id: uuid.UUID, token: str, action: str, err: Exception, actor: str
    ) -> None:
        now = self.clock()
        with self.sessions.begin() as session:
            if not store.fence_lease(session, item_id, token, now):
                return
            item = session.get(WorkItem, item_id, populate_existing=True)
            if item is None:
                return
            record_failure(session, item, action, err, actor, self.settings, now)


def record_failure(
    session: Session,
    item: WorkItem,
    action: str,
    err: Exception,
    actor: str,
    settings: ProcessingConfig,
    now: datetime,
) -> None:
    """Count a failed action: back off (or requeue, or fail the item), let go of the lease.

    The caller holds the item's lease fence in the open transaction.
    """
    known = isinstance(err, RetryLater | PermanentFailure | Requeue)
    message = (f"{action}: {err}" if known else f"{action}: {type(err).__name__}: {err}")[:4000]
    log.warning("work item %s: %s", item.id, message)
    old = {**snapshot(item), "attempts": item.attempts}
    if not (item.error or "").startswith(f"{action}: "):
        item.attempts = 0  # another action failed before: a new run of failures
    item.attempts += 1
    item.error = message
    trigger = {"source": "worker", "action": action, "error": message}
    requeue = isinstance(err, Requeue)
    if not requeue and (
        isinstance(err, PermanentFailure) or item.attempts >= settings.max_attempts
    ):
        reason = (
            "permanent failure" if isinstance(err, PermanentFailure) else "max attempts reached"
        )
        set_phase(session, item, FAILED, actor=actor, trigger={**trigger, "reason": reason})
        return
    delay = backoff_delay(
        item.attempts, settings.backoff_base_seconds, settings.backoff_max_seconds
    )
    if isinstance(err, RetryLater | Requeue) and err.retry_after:
        delay = max(delay, err.retry_after)
    item.run_after = now + timedelta(seconds=delay)
    item.lease_owner = item.lease_token = None
    item.leased_until = None
    if requeue:
        # Back in line at its old place (same seq); its slot is free meanwhile,
        # and the dispatcher admits it again once run_after has passed.
        item.admission = QUEUED
        signal(session, PROJECT_QUEUED, item.project)
    audit(
        session,
        AuditRecord(
            "requeued" if requeue else "action_failed",
            actor,
            item.id,
            old_state=old,
            new_state={**snapshot(item), "attempts": item.attempts},
            trigger={**trigger, "retry_in_seconds": delay},
        ),
    )
