"""The worker hand-off: claims for the free workers, the worker threads, their leases.

The processing manager's scheduler asks this to claim items for the free workers
(`wq.engine.claims`); its batches hand on what needs an action that is not cheap.
Either way the items go to the pool of worker threads (`wq.engine.workers`), up to
its capacity, and the rest go back to the queue in their place in line.

The capacity follows the pace of recent actions. While they are slow (a call to
GitLab, a program), it is one item per worker, as many in flight as there are workers.
While they are quick, items wait in line for the workers here too (up to
`MAX_ITEMS_PER_WORKER` each, as many as the workers get through in about
`QUEUED_SECONDS`): a claim then takes many items at once, once half the line has
gone, and each worker stores what its items' last actions wrote, and releases them, in
one transaction for several items (`wq.engine.finish_group`) when it finds the line
empty or the first of them has waited long enough. An item waiting in a group takes
no room in the line: the next claim goes on while the groups are stored.

It knows which items it holds: the heartbeat extends their leases until they are
stored, and the manager's shutdown waits on the same condition for them to end.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, select, update
from sqlalchemy.orm import Session, sessionmaker

from wq.engine import leases, store
from wq.engine.admission import AdmissionPass
from wq.engine.claims import WorkerClaims, claim_for_workers, item_loads
from wq.engine.config import ProcessingConfig
from wq.engine.metrics import Metrics
from wq.engine.models import WorkItem
from wq.engine.outage import EngineFailures
from wq.engine.registry import TypeRegistry
from wq.engine.runner import ItemRunner
from wq.engine.wakeup import Wakeup
from wq.engine.workers import WorkerPool

# Items per worker the hand-off holds at most, and how long the workers should take,
# at the recent pace, to get through them.
MAX_ITEMS_PER_WORKER = 32
QUEUED_SECONDS = 0.5
# How much each item's time on a worker moves the recent pace (an exponential average).
PACE_WEIGHT = 0.1


def monotonic_due(due: datetime | None, now: datetime) -> float | None:
    """The monotonic time of `due`, a moment of the clock that read `now`."""
    return None if due is None else time.monotonic() + (due - now).total_seconds()


class WorkerHandoff:
    """Runs claimed items on a bounded pool of worker threads and keeps their leases.

    `returned` is the manager's condition: it guards `running` and is notified each
    time a worker returns, so that a shutdown can wait for the last one.
    """

    def __init__(
        self,
        sessions: sessionmaker[Session],
        runner: ItemRunner,
        registry: TypeRegistry,
        settings: ProcessingConfig,
        *,
        owner: str,
        wakeup: Wakeup,
        failures: EngineFailures,
        metrics: Metrics,
        stopping: threading.Event,
        returned: threading.Condition,
        clock: Callable[[], datetime],
    ) -> None:
        self._sessions = sessions
        self._runner = runner
        self._settings = settings
        self._owner = owner
        self._wakeup = wakeup
        self._failures = failures
        self._metrics = metrics
        self._item_loads = item_loads(registry)
        self._stopping = stopping
        self._clock = clock
        self.returned = returned
        self.claim_lock = threading.Lock()  # one claim at a time: free slots never overbooked
        # Monotonic time an admitted item of the workers' types comes due (a lease or a
        # backoff runs out), as the last claim saw.
        self.due: float | None = None
        # Items held (waiting for a worker, running, or waiting to be stored): item id
        # -> lease token (under `returned`).
        self.running: dict[uuid.UUID, str] = {}
        self._grouped = 0  # of them, items waiting in a group to be stored (under `returned`)
        # Recent seconds per item on a worker; it starts slow: one item per worker.
        self.pace = QUEUED_SECONDS
        # Items were given back for want of a free worker; cleared when one returns.
        self.surplus_waiting = False
        # Each worker thread's items waiting to be stored, by its slot.
        self._groups = [runner.new_group() for _ in range(settings.workers)]
        self.pool: WorkerPool[leases.Claim] = WorkerPool(
            self._work, settings.workers, idle=self._finish
        )

    @property
    def busy(self) -> int:
        """How many workers hold items right now."""
        with self.returned:
            return min(len(self.running), self._settings.workers)

    @property
    def capacity(self) -> int:
        """How many items the workers take at the recent pace."""
        per_worker = int(QUEUED_SECONDS / max(self.pace, 1e-6))
        return self._settings.workers * max(1, min(MAX_ITEMS_PER_WORKER, per_worker))

    @property
    def free(self) -> int:
        """How many more items the workers take now."""
        with self.returned:
            return self.capacity - len(self.running) + self._grouped

    @property
    def claim_soon(self) -> bool:
        """Whether a worker will soon wake the scheduler for a claim: actions are quick
        (items wait in line) and more than half the line is left, so the claim comes
        within about `QUEUED_SECONDS` / 2."""
        capacity = self.capacity
        free = self.free
        return capacity > self._settings.workers and free < capacity and not self._claims_now(free)

    def _claims_now(self, free: int) -> bool:
        """Whether a claim is due: a worker is free, or half the line has gone."""
        return free > 0 and free >= (self.capacity - self._settings.workers) // 2

    def claim(self, types: Sequence[str], *, admission: AdmissionPass | None = None) -> int:
        """Claim items of `types` for the free workers and start them; return how many.

        `admission` runs in the claim's transaction, whose commit is its commit too, after
        the claim's statement: what it admits is claimed then by a second statement. If
        no claim is due, it runs in a transaction of its own.
        """
        with self.claim_lock:
            free = self.free
            if not types or not self._claims_now(free) or self._stopping.is_set():
                # Nothing to wait for here: a worker that returns wakes the scheduler.
                self.due = None
                if admission is not None:
                    with self._sessions.begin() as session:
                        admission.run(session)
                return 0
            with self._sessions.begin() as session:
                now = self._clock()
                taken = self._claim_in(session, types, free, now)
                if admission is not None and admission.run(session) and not taken.full:
                    more = self._claim_in(session, types, free - len(taken.claims), now)
                    taken = WorkerClaims(taken.claims + more.claims, more.full)
                due = None if taken.full else leases.next_due(session, types, now)
            self.due = monotonic_due(due, now)
            self._metrics.claims_per_pass.observe(len(taken.claims))
            self.hand_over(taken.claims, free)
            if taken.full and not self.surplus_waiting:
                # Maybe more to claim: the next pass comes at once. Not while items
                # given back for want of a worker wait: that pass would take the same
                # items again; a worker that returns wakes the scheduler.
                self._wakeup.poke()
            return len(taken.claims)

    def _claim_in(
        self, session: Session, types: Sequence[str], free: int, now: datetime
    ) -> WorkerClaims:
        return claim_for_workers(
            session,
            owner=self._owner,
            types=types,
            free=free,
            now=now,
            lease_until=now + timedelta(seconds=self._settings.lease_seconds),
            # SQLite: workers read their items themselves, outside the write lock
            # (loading here would hold it longer; no round trips to save).
            load=self._item_loads if store.is_postgres(session) else None,
        )

    def hand_over(self, claims: list[leases.Claim], free: int) -> None:
        """Hand up to `free` claimed items to the workers; give the rest back.

        The caller holds the claim lock.
        """
        workers, surplus = claims[: max(free, 0)], claims[max(free, 0) :]
        if claims:
            self.surplus_waiting = bool(surplus)
        if surplus:
            # More items want a worker than there are free ones: the rest wait, leased to
            # nobody, in their place in line.
            with self._sessions.begin() as session:
                leases.give_back(session, [(c.id, c.token) for c in surplus], announce=False)
        with self.returned:
            if not self._stopping.is_set():
                self._start(workers)
                return
        # Shutdown began meanwhile: no action ran, give the items back (and tell the
        # other replicas).
        with self._sessions.begin() as session:
            leases.give_back(session, [(claim.id, claim.token) for claim in workers])

    def give_back_waiting(self) -> int:
        """Shutting down: give back the items no worker has started (their slots kept,
        other replicas told); return how many."""
        claims = self.pool.take_waiting()
        if claims:
            with self._sessions.begin() as session:
                leases.give_back(session, [(claim.id, claim.token) for claim in claims])
            self._returned([(claim.id, claim.token) for claim in claims])
        return len(claims)

    def _start(self, claims: list[leases.Claim]) -> None:
        """Hand claimed items to the worker pool (caller holds `returned`).

        They are held from now on: the heartbeat extends their leases, and the
        scheduler claims for the room left.
        """
        for claim in claims:
            self.running[claim.id] = claim.token
        # (The pool is not closed before `_stopping` is set; should a thread fail to
        # start, the items stay in line for the threads there are or come.)
        self.pool.submit(*claims)

    def _work(self, claim: leases.Claim, slot: int) -> None:
        # The owner tells replicas apart in the audit log; the slot tells workers apart.
        actor = f"{self._owner}/worker-{slot}"
        group = self._groups[slot]
        if group.due():
            self._finish(slot)
        started = time.monotonic()
        kept = False  # in the worker's group, to be stored with its other items
        try:
            kept = self._runner.run(claim.id, claim.token, actor, item=claim.item, group=group)
        except Exception as err:
            self._failures.failed(f"processing of work item {claim.id}", err)
        finally:
            self.pace += PACE_WEIGHT * (time.monotonic() - started - self.pace)
            if not kept:
                self._returned([(claim.id, claim.token)])
            else:
                with self.returned:
                    self._grouped += 1
                    free = self.capacity - len(self.running) + self._grouped
                if self._claims_now(free):
                    self._wakeup.poke()

    def _finish(self, slot: int) -> None:
        """Store and release the items a worker's group holds (the worker's thread)."""
        group = self._groups[slot]
        held = group.held()
        if not held:
            return
        try:
            self._runner.finish(group)
        except Exception as err:
            self._failures.failed("storing what work items' actions wrote", err)
        finally:
            with self.returned:
                self._grouped -= len(held)
            self._returned(held)

    def _returned(self, held: list[tuple[uuid.UUID, str]]) -> None:
        """Items the workers are done with (id, lease token): room for a claim, and the
        shutdown told.

        An item is let go only under the token it was held with: one whose lease ran
        out while a worker still had it (a stalled process) may have been claimed
        again meanwhile, by this replica too, and that claim's worker holds it now
        (its lease extended by the heartbeat until its own worker is done).
        """
        with self.returned:
            for item_id, token in held:
                if self.running.get(item_id) == token:
                    del self.running[item_id]
            self.returned.notify_all()
            free = self.capacity - len(self.running) + self._grouped
        self.surplus_waiting = False
        if self._claims_now(free):
            self._wakeup.poke()

    def heartbeat_loop(self, halted: threading.Event) -> None:
        """Extend the running items' leases every third of a lease until `halted`.

        It runs through the shutdown grace (the leases of running actions must not
        lapse) and ends early once shutdown began and no worker is busy.
        """
        interval = self._settings.lease_seconds / 3
        while not halted.wait(interval):
            if self._stopping.is_set() and not self.busy:
                return
            try:
                self.heartbeat()
            except Exception as err:
                self._failures.failed("heartbeat", err)

    def hold(self, item_ids: list[uuid.UUID], seconds: float) -> int:
        """Extend the leases of these running items to `seconds` from now (never
        shorten one); return how many are still held."""
        with self.returned:
            running = {
                item_id: self.running[item_id] for item_id in item_ids if item_id in self.running
            }
        if not running:
            return 0
        lease_until = self._clock() + timedelta(seconds=seconds)
        return self._extend(running, lease_until, WorkItem.leased_until < lease_until)

    def heartbeat(self) -> int:
        """Extend the leases of every item being processed; return how many still held."""
        with self.returned:
            running = dict(self.running)
        if not running:
            return 0
        lease_until = self._clock() + timedelta(seconds=self._settings.lease_seconds)
        return self._extend(running, lease_until)

    def _extend(
        self, running: dict[uuid.UUID, str], lease_until: datetime, *also: ColumnElement[bool]
    ) -> int:
        """Set the leases of these items (id -> token) still ours to `lease_until`.

        A row another transaction holds is skipped, not waited for: waiting would hold
        up every other lease of the statement (for as long as the statement timeout,
        which would fail them all). Its holder is changing the item anyway; its lease
        is extended by the next heartbeat.
        """
        mine = (
            select(WorkItem.id)
            .where(WorkItem.id.in_(running), WorkItem.lease_token.in_(set(running.values())), *also)
            .with_for_update(skip_locked=True)
        )
        with self._sessions.begin() as session:
            result = session.execute(
                update(WorkItem)
                .where(WorkItem.id.in_(mine.scalar_subquery()))
                .values(leased_until=lease_until)
                .execution_options(synchronize_session=False)
            )
        return int(result.rowcount)  # type: ignore[attr-defined]
