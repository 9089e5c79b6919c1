"""Batches of cheap actions: claimed, run and released in one transaction.

A type may mark actions cheap (`ItemType.cheap_actions`): no external call, changes
only through the ORM objects given. One transaction does everything for a batch of
such items: one query takes up to `batch_size` claimable items of those types and
locks their rows until commit (skipping rows other replicas hold, on PostgreSQL) -
the locks are the batch's fence, no lease is written; then each decider is asked,
cheap actions run, the deciders are asked again, the items let go are released with
one UPDATE, and the audit rows of the whole batch are written in one statement (COPY
on PostgreSQL). Items that want an action that is not cheap are leased in the same
transaction and handed to worker threads (`wq.engine.runner`).

An action that raises rolls the transaction back; the same items are then taken
again with that item's failure recorded instead of its action, so the others' work
commits and the failure is counted once. The failure waits in `PendingFailures`,
shared by the runner's threads: another thread's batch may take the item first, and
then that batch records it.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from wq.engine import leases
from wq.engine.audit import AuditRecord, audit
from wq.engine.claims import audit_takeovers
from wq.engine.config import ProcessingConfig
from wq.engine.failures import record_failure
from wq.engine.fence import _IN_EXECUTOR
from wq.engine.group_writes import write_dimensions
from wq.engine.leases import Claim
from wq.engine.metrics import Metrics, after_commit, metrics_of
from wq.engine.models import TERMINAL_PHASES, WorkItem
from wq.engine.registry import ActionContext, Decision, Requeue, TypeRegistry, Wait
from wq.engine.releases import Release, release_slots, snapshot
from wq.engine.store import is_postgres

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
        self.stamp: int | None = None  # the item's stamp when its batch took it


class PendingFailures:
    """Failed actions whose batch rolled back, until a batch that holds the item records
    them (thread-safe). A batch takes its item's failure while it holds the item's row,
    and gives it back if it rolls back, so a failure is recorded once. One that no
    batch of this process records (another replica took the item) is dropped after
    `keep_seconds`."""

    def __init__(self, keep_seconds: float) -> None:
        self.keep_seconds = keep_seconds
        self._lock = threading.Lock()
        self._failures: dict[uuid.UUID, tuple[_ActionFailed, float]] = {}

    def add(self, failure: _ActionFailed) -> None:
        """Keep a failure until a batch records it."""
        now = time.monotonic()
        with self._lock:
            stale = [k for k, (_, at) in self._failures.items() if now - at > self.keep_seconds]
            for key in stale:
                del self._failures[key]
            self._failures[failure.item_id] = (failure, now)

    def take(self, item_id: uuid.UUID, stamp: int, step: int, action: str) -> _ActionFailed | None:
        """The failure of `action` at `step` of this item, removed; None if there is none,
        or if the item changed since (`stamp`: another replica took it meanwhile)."""
        with self._lock:
            found = self._failures.get(item_id)
            if found is None:
                return None
            failure = found[0]
            if failure.stamp != stamp:
                del self._failures[item_id]  # the item moved on without it
                return None
            if (failure.step, failure.action) != (step, action):
                return None
            del self._failures[item_id]
            return found[0]

    def give_back(self, failures: Sequence[_ActionFailed]) -> None:
        """Failures a batch took and did not commit."""
        for failure in failures:
            self.add(failure)


@dataclass(frozen=True)
class Taken:
    """What a batch did: the items it took, and the leased ones that need a worker.

    `due`: when the batch saw the next item of its types come due (a full batch:
    only its own items).
    """

    taken: int
    handoff: list[Claim]
    due: datetime | None = None


class BatchRunner:
    """Runs batches of cheap actions; shared by one manager's scheduler and batch threads."""

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
        self.metrics = metrics_of(sessions)
        self.failures = PendingFailures(keep_seconds=settings.lease_seconds)

    @property
    def cheap_types(self) -> list[str]:
        """The registered types that have cheap actions."""
        return [name for name in self.registry.names if self.registry.get(name).cheap_actions]

    def take(self, owner: str, *, limit: int, on_full: Callable[[], None] | None = None) -> Taken:
        """Claim up to `limit` items of the cheap types and run their cheap actions.

        The claims returned are leased to `owner` (one token) and need a worker.
        `on_full` is called as soon as the batch is known to have taken `limit` items
        (more may be waiting), before its actions run.
        """
        types = self.cheap_types
        among: list[uuid.UUID] | None = None
        careful = False  # flush after each action, to find one whose writes are refused
        for _ in range(limit + 2):
            chosen: list[uuid.UUID] = []
            try:
                return self._attempt(owner, types, limit, among, on_full, careful, chosen)
            except _ActionFailed as failure:
                if not careful and isinstance(failure.error, SQLAlchemyError):
                    # Maybe another action's writes, flushed by this one's query.
                    careful = True
                else:
                    self.failures.add(failure)
            except Exception:
                if careful or not chosen:
                    raise  # not one action's doing (the database, say)
                log.warning("a batch failed to commit; again, an action at a time", exc_info=True)
                careful = True
            among, on_full = chosen, None
        raise RuntimeError("a batch kept failing")  # pragma: no cover (bounded above)

    def _attempt(
        self,
        owner: str,
        types: Sequence[str],
        limit: int,
        among: list[uuid.UUID] | None,
        on_full: Callable[[], None] | None,
        careful: bool,
        chosen: list[uuid.UUID],
    ) -> Taken:
        """One try of a batch; `chosen` gets the ids of the items it took."""
        now = self.clock()
        actor = f"{owner}/batch"
        with self.sessions() as session:
            items = leases.lock_claimable(session, types=types, limit=limit, now=now, among=among)
            if not items:
                due = leases.next_due(session, types, now)
                session.rollback()
                return Taken(0, [], due)
            chosen.extend(item.id for item in items)
            if among is None:
                self.metrics.claims_per_pass.observe(len(items))
                if len(items) == limit and on_full is not None:
                    on_full()
            # Expired leases this batch takes over, with their previous holders.
            taken_over = [
                Claim(item.id, "", item.lease_owner, item.leased_until, item.type)
                for item in items
                if item.leased_until is not None
            ]
            releases: list[Release] = []
            handoff: list[WorkItem] = []
            recorded: list[_ActionFailed] = []  # failures this batch counts
            try:
                for item in items:
                    if not self._advance(session, item, actor, recorded, now, releases, careful):
                        handoff.append(item)
                if not careful and is_postgres(session):
                    write_dimensions(session, items)  # (a careful try flushed each already)
                token = leases.new_token()
                lease_until = now + timedelta(seconds=self.settings.lease_seconds)
                leases.lease(
                    session,
                    [item.id for item in handoff],
                    owner=owner,
                    token=token,
                    lease_until=lease_until,
                )
                # Those handed on are audited with their new lease; the others were held
                # by this batch's row locks only.
                handed = {item.id for item in handoff}
                audit_takeovers(
                    session, owner, [c for c in taken_over if c.id in handed], lease_until
                )
                audit_takeovers(session, owner, [c for c in taken_over if c.id not in handed], None)
                release_slots(session, releases, actor=actor, now=now)
                # When the next item comes due: a full batch knows its own backoffs and
                # holds (the next batch follows at once and reads the rest).
                due = (
                    min(
                        (i.run_after for i in items if i.run_after and i.run_after > now),
                        default=None,
                    )
                    if len(items) == limit
                    else leases.next_due(session, types, now)
                )
                session.commit()
            except BaseException:
                # Not committed: the failures it took wait for the next batch again
                # (given back while this one still holds the rows).
                self.failures.give_back(recorded)
                session.rollback()
                raise
        if taken_over:
            self.metrics.lease_rescues.labels("claim").inc(len(taken_over))
        claims = [Claim(item.id, token, None, None, item.type) for item in handoff]
        return Taken(len(items), claims, due)

    def _decide(self, item: WorkItem, now: datetime) -> Decision:
        if item.phase in TERMINAL_PHASES:
            return None
        return self.registry.get(item.type).decider(item, now)

    def _advance(
        self,
        session: Session,
        item: WorkItem,
        actor: str,
        recorded: list[_ActionFailed],
        now: datetime,
        releases: list[Release],
        careful: bool,
    ) -> bool:
        """Take one item as far as cheap actions go; False when it needs a worker.

        Items to let go are added to `releases`, written together before the commit.
        An item whose decider raises goes to a worker too (which reports it), so that
        it does not hold up the batch.
        """
        item_type = self.registry.get(item.type)
        stamp = item.stamp  # as committed: what a failure of this batch's is bound to
        for step in range(MAX_STEPS):
            try:
                decision = self._decide(item, now)
            except Exception:
                log.exception("deciding on work item %s failed; it goes to a worker", item.id)
                return False
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
            failure = self.failures.take(item.id, stamp, step, decision)
            if failure is not None:
                # It raised in an earlier batch: count it, do not rerun it.
                recorded.append(failure)
                record_failure(session, item, decision, failure.error, actor, self.settings, now)
                return True
            try:
                acted = self._act(session, item, step, decision, actor, now, careful)
            except _ActionFailed as failed:
                failed.stamp = stamp
                raise
            if not acted:
                releases.append(Release(item, {"source": "worker", "action": decision}))
                return True
        return False

    def _act(
        self,
        session: Session,
        item: WorkItem,
        step: int,
        action: str,
        actor: str,
        now: datetime,
        careful: bool,
    ) -> bool:
        """Run one cheap action in the batch; False once the item is terminal.

        `careful`: its writes are flushed at once, so that a write the database refuses
        is this action's failure (else they go with the batch's, at its end).
        """
        kind, item_id = item.type, item.id  # readable after a failed flush, too
        item_type = self.registry.get(kind)
        executor = self.registry.executor(kind, action)
        old = snapshot(item)
        failures, failure_message = item.attempts, item.error
        session.info[_IN_EXECUTOR] = True
        started = time.monotonic()
        context = ActionContext(session, item, now, item_type.settings, actor)
        try:
            executor(context)
            if careful:
                session.flush()
        except Exception as err:
            # Counted now: the batch runs again without this action, never rerunning it
            # (unless the database refused writes that may be another action's).
            if careful or not isinstance(err, SQLAlchemyError):
                outcome = "requeued" if isinstance(err, Requeue) else "error"
                seconds = time.monotonic() - started
                metrics_of(session).count_run(kind, action, outcome, seconds)
            raise _ActionFailed(item_id, step, action, err) from err
        finally:
            session.info[_IN_EXECUTOR] = False
        # Counted once the batch commits: a batch rolled back for another item's failure
        # runs this action again.
        seconds = time.monotonic() - started

        def count(metrics: Metrics) -> None:
            metrics.count_run(kind, action, "succeeded", seconds)

        after_commit(session, count)
        if failures:
            # A success ends the run of failures: the limit counts consecutive ones.
            item.attempts = 0
            if item.error == failure_message:
                item.error = None
        new = snapshot(item)
        if not (context.quiet and new == old and not failures):
            audit(
                session,
                AuditRecord(
                    "action_completed",
                    actor,
                    item.id,
                    old_state=old,
                    new_state=new,
                    trigger={"source": "worker", "action": action},
                ),
            )
        return item.phase not in TERMINAL_PHASES
