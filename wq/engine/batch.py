"""Cheap actions of a claimed batch, run on the scheduler thread in one transaction.

A type may mark actions cheap (`ItemType.cheap_actions`): no external call, changes
only through the ORM objects given. For the claimed items of such types one
transaction does everything: one query loads the items still under this claim's
lease token and locks their rows until commit (on PostgreSQL), so they are fresh and
nobody else can change them meanwhile; then each decider is asked, cheap actions run,
the deciders are asked again, and the items let go are released with one UPDATE and
the audit rows of the whole batch written in one statement (COPY on PostgreSQL).
Items that want an action that is not cheap are handed to worker threads with their
lease (`wq.engine.runner`).

An action that raises rolls the transaction back; the batch is then run again from
the start with that item's failure recorded instead of its action, so the others'
work commits and the failure is counted once.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from wq.engine.audit import AuditRecord, audit
from wq.engine.config import ProcessingConfig
from wq.engine.fence import _IN_EXECUTOR
from wq.engine.items import Release, release_slots, snapshot
from wq.engine.metrics import Metrics, after_commit, metrics_of
from wq.engine.models import TERMINAL_PHASES, WorkItem
from wq.engine.registry import ActionContext, Decision, Requeue, TypeRegistry, Wait
from wq.engine.runner import record_failure
from wq.engine.store import Claim

log = logging.getLogger("wq.engine.processing")

# Cheap actions one item may run in a row within a batch before it is handed to a
# worker (which has the per-item deadline): a decider that never settles cannot
# hold the scheduler.
MAX_STEPS = 8


class _ActionFailed(Exception):
    """An action of the batch raised: the batch is rolled back and run again."""

    def __init__(self, item_id: uuid.UUID, step: int, action: str, error: Exception) -> None:
        super().__init__(str(item_id))
        self.item_id = item_id
        self.step = step
        self.action = action
        self.error = error


class BatchRunner:
    """Runs the cheap part of claimed batches; shared by one manager's scheduler."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        registry: TypeRegistry,
        settings: ProcessingConfig,
        clock: Callable[[], datetime],
    ) -> None:
        self.sessions = sessions
        self.registry = registry
        self.settings = settings
        self.clock = clock

    @property
    def cheap_types(self) -> list[str]:
        """The registered types that have cheap actions."""
        return [name for name in self.registry.names if self.registry.get(name).cheap_actions]

    def batchable(self, item_type: str) -> bool:
        """Whether items of this type go through the batch (it has cheap actions)."""
        return item_type in self.registry and bool(self.registry.get(item_type).cheap_actions)

    def run(self, claims: Sequence[Claim], actor: str) -> list[Claim]:
        """Process a batch of claims (one lease token); return those that need a worker.

        The claims returned still hold their lease. Items whose lease was lost
        meanwhile are left alone: nothing of theirs is written.
        """
        if not claims:
            return []
        failed: dict[uuid.UUID, _ActionFailed] = {}
        for _ in range(len(claims) + 1):
            try:
                return self._attempt(claims, actor, failed)
            except _ActionFailed as failure:
                failed[failure.item_id] = failure
        raise RuntimeError("a batch kept failing")  # pragma: no cover (bounded above)

    def _attempt(
        self, claims: Sequence[Claim], actor: str, failed: dict[uuid.UUID, _ActionFailed]
    ) -> list[Claim]:
        now = self.clock()
        by_id = {claim.id: claim for claim in claims}
        token = claims[0].token
        handoff: list[Claim] = []
        with self.sessions() as session:
            # The fence of the whole batch: the rows still ours, loaded and locked (on
            # PostgreSQL) until commit, so nobody else changes them meanwhile. A row
            # lock, not an UPDATE: no new row version to write.
            loaded = {
                item.id: item
                for item in session.execute(
                    select(WorkItem)
                    .where(WorkItem.id.in_(list(by_id)), WorkItem.lease_token == token)
                    .with_for_update()
                    .execution_options(populate_existing=True)
                ).scalars()
            }
            if not loaded:
                session.rollback()
                return []
            releases: list[Release] = []
            for claim in claims:
                item = loaded.get(claim.id)
                if item is None:
                    continue
                try:
                    if not self._advance(session, item, actor, failed.get(item.id), now, releases):
                        handoff.append(claim)
                except _ActionFailed:
                    session.rollback()
                    raise
            release_slots(session, releases, actor=actor, now=now)
            session.commit()
        return handoff

    def _decide(self, item: WorkItem, now: datetime) -> Decision:
        if item.phase in TERMINAL_PHASES:
            return None
        return self.registry.get(item.type).decider(item, now)

    def _advance(
        self,
        session: Session,
        item: WorkItem,
        actor: str,
        failure: _ActionFailed | None,
        now: datetime,
        releases: list[Release],
    ) -> bool:
        """Take one item as far as cheap actions go; False when it needs a worker.

        Items to let go are added to `releases`, written together before the commit.
        """
        item_type = self.registry.get(item.type)
        for step in range(MAX_STEPS):
            decision = self._decide(item, now)
            if decision is None:
                trigger = (
                    {"source": "worker", "reason": "phase is terminal"}
                    if item.phase in TERMINAL_PHASES
                    else {"source": "decider", "reason": "nothing to do"}
                )
                releases.append(Release(item, trigger))
                return True
            if isinstance(decision, Wait):
                # Keep the slot, no audit row: nothing about the item changed.
                item.run_after = decision.until
                item.lease_owner = item.lease_token = None
                item.leased_until = None
                return True
            if decision not in item_type.cheap_actions:
                return False
            if failure is not None and (failure.step, failure.action) == (step, decision):
                # It raised in an earlier attempt of this batch: count it, do not rerun it.
                record_failure(session, item, decision, failure.error, actor, self.settings, now)
                return True
            if not self._act(session, item, step, decision, actor, now):
                releases.append(Release(item, {"source": "worker", "action": decision}))
                return True
        return False

    def _act(
        self, session: Session, item: WorkItem, step: int, action: str, actor: str, now: datetime
    ) -> bool:
        """Run one cheap action in the batch; False once the item is terminal."""
        item_type = self.registry.get(item.type)
        executor = self.registry.executor(item.type, action)
        old = snapshot(item)
        failures, failure_message = item.attempts, item.error
        session.info[_IN_EXECUTOR] = True
        started = time.monotonic()
        try:
            executor(ActionContext(session, item, now, item_type.settings, actor))
        except Exception as err:
            # Counted now: the batch runs again without this action, never rerunning it.
            outcome = "requeued" if isinstance(err, Requeue) else "error"
            metrics_of(session).count_run(item.type, action, outcome, time.monotonic() - started)
            raise _ActionFailed(item.id, step, action, err) from err
        finally:
            session.info[_IN_EXECUTOR] = False
        # Counted once the batch commits: a batch rolled back for another item's failure
        # runs this action again.
        kind, seconds = item.type, time.monotonic() - started

        def count(metrics: Metrics) -> None:
            metrics.count_run(kind, action, "succeeded", seconds)

        after_commit(session, count)
        if failures:
            # A success ends the run of failures: the limit counts consecutive ones.
            item.attempts = 0
            if item.error == failure_message:
                item.error = None
        trigger = {"source": "worker", "action": action}
        audit(
            session,
            AuditRecord(
                "action_completed",
                actor,
                item.id,
                old_state=old,
                new_state=snapshot(item),
                trigger=trigger,
            ),
        )
        return item.phase not in TERMINAL_PHASES
