"""One action on a claimed item: its executor run under the lease fence, counted,
audited once its writes are fenced, and its failure recorded.

`wq.engine.runner` drives an item from action to action; this runs each of them.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.orm import Session, sessionmaker

from wq.engine.audit import AuditRecord, audit
from wq.engine.config import ProcessingConfig
from wq.engine.failures import record_failure
from wq.engine.fence import LeaseLost, fenced_executor, lock_lease
from wq.engine.item_reads import ItemReads
from wq.engine.metrics import metrics_of
from wq.engine.models import WorkItem
from wq.engine.registry import ActionContext, Requeue, TypeRegistry
from wq.engine.releases import snapshot

log = logging.getLogger("wq.engine.processing")


@dataclass
class ActionDone:
    """An action that ran; its writes are not committed yet."""

    action: str
    type_name: str
    started: float
    fenced: bool = False  # its writes are under the lease fence (it succeeded)
    # Its audit row, until it is deferred with the writes (once they are fenced) or
    # written with the release.
    record: AuditRecord | None = None


class ActionRunner:
    """Runs one executor at a time on an item a worker holds (shared by the workers)."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        registry: TypeRegistry,
        settings: ProcessingConfig,
        clock: Callable[[], datetime],
        reads: ItemReads,
    ) -> None:
        self.sessions = sessions
        self.registry = registry
        self.settings = settings
        self.clock = clock
        self.reads = reads
        self.metrics = metrics_of(sessions)

    def run(
        self, session: Session, item: WorkItem, token: str, action: str, actor: str
    ) -> ActionDone | None:
        """Run one executor and stage its changes; None when the item is let go.

        On success the transaction is left open with the executor's writes. If the
        executor's statements began it, the item is locked under the fence and known
        fresh (read again only if someone changed it since it was read); if it sent
        none, nothing is locked or written yet, and the caller fences before anything
        is stored. Either way the caller decides (and releases) in the same transaction.
        """
        item_id = item.id
        item_type = self.registry.get(item.type)
        executor = self.registry.executor(item.type, action)
        old = snapshot(item)
        failures, failure_message = item.attempts, item.error
        read_stamp = item.stamp
        started = time.monotonic()
        context = ActionContext(session, item, self.clock(), item_type.settings, actor)
        try:
            with fenced_executor(session, item_id, token) as fence:
                executor(context)
        except LeaseLost:
            session.rollback()
            self.count(item_type.name, action, "lease_lost", started)
            log.warning("lost the lease of work item %s during %s; discarded", item_id, action)
            return None
        except Exception as err:
            session.rollback()
            outcome = "requeued" if isinstance(err, Requeue) else "error"
            self.count(item_type.name, action, outcome, started)
            self.record_failure(item_id, token, action, err, actor)
            return None
        done = ActionDone(action, item_type.name, started)
        if fence.stamp is not None and fence.stamp != read_stamp:
            # Changed since read (an event, an API call): the executor's changes go
            # in on top of it, and what follows is decided on the item as stored now.
            session.flush()
            self.reads.reread(session, item_id)
        if failures:
            # A success ends the run of failures: the limit counts consecutive ones.
            item.attempts = 0
            if item.error == failure_message:  # unless the executor set an error of its own
                item.error = None
        new = snapshot(item)
        if not (context.quiet and new == old and not failures):
            done.record = AuditRecord(
                "action_completed",
                actor,
                item_id,
                old_state=old,
                new_state=new,
                trigger={"source": "worker", "action": action},
            )
        if fence.stamp is not None:
            self.fenced(session, done)
        return done

    def count(self, type_name: str, action: str, outcome: str, started: float) -> None:
        """Count one run of `action` and its outcome, timed from `started`."""
        self.metrics.count_run(type_name, action, outcome, time.monotonic() - started)

    def record_failure(
        self, item_id: uuid.UUID, token: str, action: str, err: Exception, actor: str
    ) -> None:
        """Record the action's failure on the item, if the lease is still ours (its
        own transaction: the action's was rolled back)."""
        now = self.clock()
        with self.sessions.begin() as session:
            if lock_lease(session, item_id, token) is None:
                return
            item = self.reads.reread(session, item_id)
            record_failure(session, item, action, err, actor, self.settings, now)

    def fenced(self, session: Session, done: ActionDone | None) -> None:
        """The last action's writes are under the fence now: it succeeded (audited)."""
        if done is None or done.fenced:
            return
        done.fenced = True
        self.count(done.type_name, done.action, "succeeded", done.started)
        if done.record is not None:
            audit(session, done.record)
            done.record = None

    def lost(self, item_id: uuid.UUID, done: ActionDone | None) -> None:
        """The lease was lost before the last action's writes were fenced: discarded."""
        if done is not None and not done.fenced:
            self.count(done.type_name, done.action, "lease_lost", done.started)
            log.warning("lost the lease of work item %s during %s; discarded", item_id, done.action)
