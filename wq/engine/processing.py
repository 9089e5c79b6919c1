"""The processing manager: the scheduler, its batches, the periodic loops, shutdown.

One scheduler thread turns wake-ups into work: it applies stored events, has the
projects that changed admitted, and leases admitted items of types without cheap
actions to the free workers (at most `workers` at once): on PostgreSQL one statement
leases and loads them, while the admission passes run beside it on a thread of their
own (`wq.engine.admitter`); on SQLite a pass admits, then claims. The worker hand-off
(`wq.engine.handoff`) runs each on one of a pool of persistent worker threads,
starting from what the claim read (`wq.engine.runner`), and its heartbeat extends the
leases of running items until the last worker has returned. Items of types with cheap
actions are taken by batches (`wq.engine.batch`), each claiming, running and releasing
up to `batch_size` items in one transaction on a batch thread, two at most at once
(`wq.engine.batch_threads`): while one waits for the database, the other runs. A
batch hands what needs an action that is not cheap to the free workers. Beside them
run the sweep and the types' periodic work (tickers).

Shutdown stops claiming at once; running actions get the grace period to end, after
which each worker hands its item back. Past the grace nothing is handed over early:
the leases of actions still running are held for the longer of one lease period and
the types' outbound request timeout (`ItemType.request_timeout_seconds`), the daemon
exits and they run out on their own, so another replica never runs an item while this
one may still be executing it or have a call for it in flight.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from datetime import datetime

from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from wq.engine.admission import AdmissionPass, HeldProjects
from wq.engine.admitter import Admitter
from wq.engine.batch import BatchRunner
from wq.engine.batch_threads import BatchThreads
from wq.engine.config import Config
from wq.engine.events import apply_stored_events
from wq.engine.failures import backoff_delay
from wq.engine.handoff import WorkerHandoff
from wq.engine.metrics import metrics_of
from wq.engine.models import utcnow
from wq.engine.outage import EngineFailures
from wq.engine.pipelined import pipelined_sessions
from wq.engine.registry import TickContext, Ticker, TypeRegistry
from wq.engine.runner import ItemRunner
from wq.engine.sweep import sweep_once
from wq.engine.wakeup import WAKEUP_KEY, Pending, Wakeup

__all__ = ["ProcessingManager", "backoff_delay", "default_owner"]

log = logging.getLogger(__name__)

# After the grace: how long the engine's own threads get to notice and end.
STOP_STEP_SECONDS = 1.0
# An item whose events could not be applied, or a project whose queue head could not
# be admitted (another transaction held it), is tried again this much later: the
# lock's end wakes nobody.
LOCKED_RETRY_SECONDS = 0.5
# Items whose stored events one transaction applies: their intake waits for it. A
# transaction's own statements cost about as much as applying a dozen items' events:
# 128 at once took about a third less CPU per event than 32 (benchmarks/events.py).
EVENT_ITEMS_PER_TRANSACTION = 128
# How long a scheduler woken by stored events alone waits for more before it applies
# them: events arrive one per request, and a transaction per event cost several times
# the CPU of applying a few together (benchmarks/events.py).
EVENT_GATHER_SECONDS = 0.01


def default_owner() -> str:
    """This process's name in lease_owner: host and pid."""
    return f"{socket.gethostname()}:{os.getpid()}"


class ProcessingManager:
    """Drives admitted items through their actions with a bounded set of workers."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        registry: TypeRegistry,
        config: Config,
        *,
        wakeup: Wakeup | None = None,
        owner: str | None = None,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.registry = registry
        self.config = config
        self.settings = config.processing
        self.wakeup = wakeup or Wakeup()
        self.owner = owner or default_owner()
        self.clock = clock
        # Sessions of our own, wired to our hub: the caller's sessionmaker is left as
        # it is, so two managers in one process never share (or steal) wake-ups.
        info = {**sessions.kw.get("info", {}), WAKEUP_KEY: self.wakeup}
        self.sessions: sessionmaker[Session] = sessionmaker(
            class_=sessions.class_, **{**sessions.kw, "info": info}
        )
        # The worker path's (claims, workers, heartbeats) and the admission passes':
        # each transaction's BEGIN goes out with its first statement on PostgreSQL
        # (`wq.engine.pipelined`).
        self._worker_sessions = pipelined_sessions(self.sessions)
        # Notified when a worker or a batch thread ends; guards the running items
        # (`self._handoff.running`) and the count of batch threads.
        self._all_returned = threading.Condition(threading.Lock())
        self._stopping = threading.Event()  # no new claims; workers hand items back
        self._halted = threading.Event()  # the heartbeat ends too
        self._deadline: float | None = None
        # Items whose events wait because another transaction held them (scheduler's).
        self._events_later: set[uuid.UUID] = set()
        # Projects whose admission waits for a queue head another transaction holds.
        self._held = HeldProjects()
        # Projects whose last pass admitted as much as a pass may: more may be queued.
        self._more_to_admit: set[str] = set()
        self._threads: list[threading.Thread] = []
        self.metrics = metrics_of(self.sessions)
        self.failures = EngineFailures(log)
        self._runner = ItemRunner(
            self._worker_sessions, registry, self.settings, clock, stopping=self._stopping
        )
        self._handoff = WorkerHandoff(
            self._worker_sessions,
            self._runner,
            registry,
            self.settings,
            owner=self.owner,
            wakeup=self.wakeup,
            failures=self.failures,
            metrics=self.metrics,
            stopping=self._stopping,
            returned=self._all_returned,
            clock=clock,
        )
        self._batch = BatchRunner(self.sessions, registry, self.settings, clock)
        self._batch_threads = BatchThreads(
            self._batch,
            self._handoff,
            self.settings,
            owner=self.owner,
            clock=clock,
            wakeup=self.wakeup,
            failures=self.failures,
            stopping=self._stopping,
            returned=self._all_returned,
        )
        # PostgreSQL: the scheduler's admission passes run beside its claims (SQLite's
        # one writer would only make them take turns).
        bind = self.sessions.kw.get("bind")
        self._admitter: Admitter | None = None
        if isinstance(bind, Engine) and bind.dialect.name == "postgresql":
            self._admitter = Admitter(
                self._worker_sessions,
                config,
                clock=clock,
                wakeup=self.wakeup,
                failures=self.failures,
                stopping=self._stopping,
                held_retry_seconds=LOCKED_RETRY_SECONDS,
            )

    # ----------------------------------------------------------------- lifecycle

    def start(self) -> None:
        """Start the scheduler, heartbeat and sweep threads, and the types' periodic work."""
        loops = (
            ("wq-scheduler", self._schedule_loop),
            ("wq-heartbeat", lambda: self._handoff.heartbeat_loop(self._halted)),
            ("wq-sweep", self._sweep_loop),
        )
        for name, target in loops:
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        for type_name in self.registry.names:
            for ticker in self.registry.get(type_name).tickers:
                thread = threading.Thread(
                    target=self._ticker_loop, args=(ticker,), name=f"wq-{ticker.name}", daemon=True
                )
                thread.start()
                self._threads.append(thread)

    def begin_stop(self, grace: float | None = None) -> None:
        """Stop claiming now; running actions have `grace` seconds from now to end.

        Safe to call from a signal handler (it takes no lock the handler's thread may
        hold), and again later: the first call fixes the deadline.
        """
        if self._deadline is None:
            grace = self.settings.shutdown_grace_seconds if grace is None else grace
            self._deadline = time.monotonic() + grace
        self._stopping.set()
        self.wakeup.poke()

    def stop(self, grace: float | None = None) -> list[uuid.UUID]:
        """Stop: no new claims, running actions end within the grace, then return.

        Heartbeats go on until the last worker has returned or the grace is over.
        Each worker hands its item back itself once its action has ended. Items whose
        actions still run at the deadline are logged and returned; their leases are
        not released (that would let another replica run them alongside) but run out
        on their own about one lease period later. Returns within the grace plus
        about one second.
        """
        self.begin_stop(grace)
        assert self._deadline is not None
        try:  # items waiting for a worker: back to the queue now, in their place
            self._handoff.give_back_waiting()
        except Exception as err:  # their leases run out as heartbeats left them
            log.warning("could not give back the items waiting for a worker: %s", err)
        with self._all_returned:
            while (self._handoff.running or self._batch_threads.running) and (
                left := self._deadline - time.monotonic()
            ) > 0:
                self._all_returned.wait(left)
            leftovers = dict(self._handoff.running)
        if leftovers:
            actions = self._runner.current
            log.warning(
                "shutdown grace over with %d action(s) still running; their leases run out "
                "on their own: %s",
                len(leftovers),
                ", ".join(f"{item_id} ({actions.get(item_id, '?')})" for item_id in leftovers),
            )
            self._hold_past_exit(list(leftovers))
        self._halted.set()
        self._handoff.pool.close()
        if self._admitter is not None:
            self._admitter.join(STOP_STEP_SECONDS)
        step_end = time.monotonic() + STOP_STEP_SECONDS
        for thread in self._threads:
            thread.join(timeout=max(0.0, step_end - time.monotonic()))
        return list(leftovers)

    def _hold_past_exit(self, item_ids: list[uuid.UUID]) -> None:
        """Hold the leases of actions still running at the deadline for one more lease
        period or the types' longest outbound request timeout, whichever is longer.

        The process exits next, but a call it made (a git push) may still be in flight
        until its client's timeout: a replica taking the item over before then could
        act alongside it.
        """
        timeouts = [self.registry.get(name).request_timeout_seconds for name in self.registry.names]
        seconds = max([self.settings.lease_seconds, *timeouts])
        try:
            self._handoff.hold(item_ids, seconds)
        except Exception as err:  # the leases run out as heartbeats left them
            log.warning("could not hold the leases of running actions past exit: %s", err)

    @property
    def busy(self) -> int:
        """How many items are being processed right now."""
        return self._handoff.busy

    def heartbeat(self) -> int:
        """Extend the leases of every item being processed; return how many still held."""
        return self._handoff.heartbeat()

    # ----------------------------------------------------------------- scheduler

    def _schedule_loop(self) -> None:
        last_resync = 0.0
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
            except Exception as err:
                self.failures.failed("scheduler pass", err)
                self._stopping.wait(self.settings.poll_interval_seconds)
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
        """One scheduler pass: apply events, admit, claim; return how many were claimed.

        `projects=None` admits every project with queued work (a resync). A batch of
        cheap actions has run when it returns (the scheduler thread's own passes run
        them in the background instead).
        """
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
                # commit, the lock in the claim's round trip (fewer round trips, and
                # fewer waits for the interpreter after them).
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

    # ----------------------------------------------------------------- periodic loops

    def _ticker_loop(self, ticker: Ticker) -> None:
        while not self._stopping.is_set():
            try:
                ticker.run(TickContext(self.sessions, self.registry, self.config, self.clock()))
            except Exception as err:
                self.failures.failed(f"periodic {ticker.name}", err)
            if self._stopping.wait(ticker.interval_seconds):
                return

    def _sweep_loop(self) -> None:
        # The first sweep runs at start: it recovers what a previous process left.
        while not self._stopping.is_set():
            try:
                sweep_once(self.sessions, self.registry, self.config)
                self.metrics.sweep_runs.labels("ok").inc()
            except Exception as err:
                self.metrics.sweep_runs.labels("error").inc()
                self.failures.failed("sweep", err)
            if self._stopping.wait(self.settings.sweep_interval_seconds):
                return
