"""The scheduler: the thread that turns wake-ups into admissions and claims.

Each pass applies the stored events of the items it was told about
(`wq.engine.events`), has the projects that changed admitted, and claims admitted
items for the free workers (`wq.engine.handoff`) and the batches of cheap actions
(`wq.engine.batch_threads`). On PostgreSQL the admission passes run beside the claims on
a thread of their own (`wq.engine.admitter`), and what they admit wakes the next pass;
on SQLite (and in `run_once`) one transaction admits, then claims what it admitted.
Between passes the scheduler waits for a wake-up (`wq.engine.wakeup`), the poll
interval, or the moment a known lease or backoff runs out, whichever comes first.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from datetime import datetime

from sqlalchemy.orm import Session, sessionmaker

from wq.engine.admission import AdmissionPass, HeldProjects
from wq.engine.admitter import Admitter
from wq.engine.batch import BatchRunner
from wq.engine.batch_threads import BatchThreads
from wq.engine.config import Config
from wq.engine.events import apply_stored_events
from wq.engine.handoff import WorkerHandoff
from wq.engine.outage import EngineFailures
from wq.engine.registry import TypeRegistry
from wq.engine.wakeup import Pending, Wakeup

# An item whose events could not be applied, or a project whose queue head could not
# be admitted (another transaction held it), is tried again this much later: the
# lock's end wakes nobody.
LOCKED_RETRY_SECONDS = 0.5
# After a failed pass the next comes this soon, each further one twice as late, up to
# the poll interval.
FAILED_PASS_RETRY_SECONDS = 0.5
# Items whose stored events one transaction applies: their intake waits for it. A
# transaction's own statements cost about as much as applying a dozen items' events:
# 128 at once took about a third less CPU per event than 32 (benchmarks/events.py).
EVENT_ITEMS_PER_TRANSACTION = 128
# How long a scheduler woken by stored events alone waits for more before it applies
# them: events arrive one per request, and a transaction per event cost several times
# the CPU of applying a few together (benchmarks/events.py).
EVENT_GATHER_SECONDS = 0.01


class Scheduler:
    """The scheduler's passes and its bookkeeping between them (its thread's alone)."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        worker_sessions: sessionmaker[Session],
        registry: TypeRegistry,
        config: Config,
        *,
        handoff: WorkerHandoff,
        batch: BatchRunner,
        batch_threads: BatchThreads,
        admitter: Admitter | None,
        wakeup: Wakeup,
        failures: EngineFailures,
        stopping: threading.Event,
        clock: Callable[[], datetime],
    ) -> None:
        self.sessions = sessions
        self._worker_sessions = worker_sessions
        self.registry = registry
        self.config = config
        self.settings = config.processing
        self._handoff = handoff
        self._batch = batch
        self._batch_threads = batch_threads
        self._admitter = admitter
        self.wakeup = wakeup
        self.failures = failures
        self._stopping = stopping
        self.clock = clock
        # Items whose events wait because another transaction held them.
        self._events_later: set[uuid.UUID] = set()
        # Projects whose admission waits for a queue head another transaction holds.
        self._held = HeldProjects()
        # Projects whose last pass admitted as much as a pass may: more may be queued.
        self._more_to_admit: set[str] = set()

    def loop(self) -> None:
        """Pass after pass until the manager stops (the scheduler thread's target)."""
        last_resync = 0.0
        failed_passes = 0
        pending = Pending(resync=True)  # the first pass looks at everything
        while not self._stopping.is_set():
            try:
                resync = (
                    pending.resync
                    or time.monotonic() - last_resync >= self.settings.poll_interval_seconds
                )
                if resync:
                    last_resync = time.monotonic()
                self._pass(
                    projects=None if resync else pending.projects,
                    event_items=pending.event_items,
                    background=True,
                    # Woken by submissions, releases and events alone, a pass claims
                    # only if it admits something or applies events to admitted items
                    # (a timer's wake-up has nothing pending).
                    claim=resync or pending.claim or not (pending.projects or pending.event_items),
                )
                self.failures.succeeded()
                failed_passes = 0
            except Exception as err:
                self.failures.failed("scheduler pass", err)
                # Tried again soon, then less often (not a whole poll interval: the
                # database may be back in a second), looking at everything: what
                # the failed pass was woken for is not known to be done.
                failed_passes += 1
                last_resync = 0.0
                retry = FAILED_PASS_RETRY_SECONDS * 2 ** min(failed_passes - 1, 10)
                self._stopping.wait(min(retry, self.settings.poll_interval_seconds))
            # A batch that ends while the wait is worked out must poke: it compares
            # when its work comes due with the end of the wait.
            self._batch_threads.waking_at = float("inf")
            wait = self._wait_seconds()
            self._batch_threads.waking_at = time.monotonic() + wait
            pending = self.wakeup.wait(wait)
            if (
                pending.events_only()
                and len(pending.event_items) < EVENT_ITEMS_PER_TRANSACTION
                and not self._stopping.wait(EVENT_GATHER_SECONDS)
            ):
                pending.add(self.wakeup.wait(0))

    def _wait_seconds(self) -> float:
        """Until the next poll, or sooner when a known lease or backoff runs out."""
        wait = self.settings.poll_interval_seconds
        if self._events_later or self._held.projects:
            wait = min(wait, LOCKED_RETRY_SECONDS)
        for due in (self._handoff.due, self._batch_threads.due):
            if due is not None:
                wait = min(wait, max(0.0, due - time.monotonic()))
        return wait

    def run_once(
        self,
        *,
        projects: set[str] | None = None,
        event_items: set[uuid.UUID] | frozenset[uuid.UUID] = frozenset(),
    ) -> int:
        """`ProcessingManager.run_once`: a pass whose batch has run when it returns."""
        return self._pass(projects=projects, event_items=event_items, background=False)

    def _pass(
        self,
        *,
        projects: set[str] | None,
        event_items: set[uuid.UUID] | frozenset[uuid.UUID],
        background: bool,
        claim: bool = True,
    ) -> int:
        """Apply events, admit, then claim for workers and take a batch.

        `claim=False`: claim only if the admission admitted something or items wait
        for a worker (nothing else made items claimable: admissions elsewhere, workers
        that return, full batches and items that come due wake a pass that claims).
        """
        later, self._events_later = self._events_later, set()
        waiting = sorted(later | set(event_items))
        for start in range(0, len(waiting), EVENT_ITEMS_PER_TRANSACTION):
            applied = apply_stored_events(
                self.sessions, waiting[start : start + EVENT_ITEMS_PER_TRANSACTION], self.registry
            )
            self._events_later |= applied.locked
            claim = claim or applied.claimable
        if background and self._admitter is not None:
            return self._pass_beside(self._admitter, projects, claim=claim)
        held_before, more_before = self._held.take(), self._take_more()
        if projects is not None:
            projects = projects | held_before | more_before
        admitting = projects is None or bool(projects)
        held: set[str] = set()
        # The claim and the batch below take what this admits: no second pass for it.
        admission = AdmissionPass(self.config, projects, clock=self.clock, held=held)
        try:
            if admitting and (claim or self._handoff.surplus_waiting):
                # A claim follows whatever the pass admits: both in one transaction, one
                # commit (fewer round trips, and fewer waits for the interpreter after them).
                claimed = self._claim_for_workers(admission=admission)
            elif admitting:
                with self._worker_sessions.begin() as session:
                    admission.run(session)
                claimed = self._claim_for_workers() if admission.admitted else 0
            else:
                claimed = self._claim_for_workers() if claim or self._handoff.surplus_waiting else 0
        except BaseException:
            self._held.projects |= held_before  # still to be looked at
            self._more_to_admit |= more_before
            raise
        if admitting:
            self._held.passed(projects, held)
            if admission.more:
                # The next pass admits more. It is the claim's that quick workers ask
                # for soon, if they do: one transaction for both (a pass of its own now
                # would hold up that claim, and the scheduler is what the workers wait for).
                self._more_to_admit |= admission.more
                if not self._handoff.claim_soon:
                    self.wakeup.poke()
        if not (claim or admission.admitted or self._handoff.surplus_waiting):
            # (While items wait for a worker, full batches do not poke: the releases'
            # wake-ups chain the batches then.)
            return 0
        return claimed + self._batch_threads.start(background=background)

    def _take_more(self) -> set[str]:
        more, self._more_to_admit = self._more_to_admit, set()
        return more

    def _pass_beside(self, admitter: Admitter, projects: set[str] | None, *, claim: bool) -> int:
        """The scheduler's pass on PostgreSQL: the admitter admits (`wq.engine.admitter`)
        while this claims; what it admits wakes the next pass, which claims it."""
        results = admitter.take_results()
        for looked_at, held in results.passed:
            self._held.passed(looked_at, held)
        self._more_to_admit |= results.more | results.failed
        if projects is not None:
            projects = projects | self._held.take() | self._take_more()
        if projects is None or projects:
            admitter.admit(projects)
        surplus = self._handoff.surplus_waiting
        claimed = self._claim_for_workers() if claim or surplus else 0
        if not (claim or surplus):
            return 0
        return claimed + self._batch_threads.start(background=True)

    def _claim_for_workers(self, *, admission: AdmissionPass | None = None) -> int:
        """Claim items for the free workers and start them; return how many.

        `admission` runs in the claim's transaction (`WorkerHandoff.claim`).
        """
        cheap = set(self._batch.cheap_types)
        # With every type's items taken by batches, workers get what batches hand on.
        # Beside types without cheap actions, workers serve all types in ready order
        # (a batch's hand-off could wait behind later work forever).
        every_type_cheap = all(name in cheap for name in self.registry.names)
        return self._handoff.claim(
            [] if every_type_cheap else list(self.registry.names), admission=admission
        )
