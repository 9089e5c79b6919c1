"""The processing manager: its threads, their start, and the shutdown.

It wires the engine's parts together and runs them: the scheduler thread
(`wq.engine.scheduler`), which applies stored events, has the projects that changed
admitted (on PostgreSQL by a thread of its own, `wq.engine.admitter`) and claims
admitted items; the worker hand-off (`wq.engine.handoff`), which runs items of types
without cheap actions on a pool of persistent worker threads, starting from what the
claim read (`wq.engine.runner`), and whose heartbeat extends their leases until the
last worker has returned; the batch threads (`wq.engine.batch_threads`), which take
items of types with cheap actions, up to `batch_size` in one transaction, two batches
at most at once; and beside them the sweep and the types' periodic work (tickers).

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

from wq.engine.admitter import Admitter
from wq.engine.batch import BatchRunner
from wq.engine.batch_threads import BatchThreads
from wq.engine.config import Config
from wq.engine.failures import backoff_delay
from wq.engine.handoff import WorkerHandoff
from wq.engine.metrics import metrics_of
from wq.engine.models import utcnow
from wq.engine.outage import EngineFailures
from wq.engine.pipelined import pipelined_sessions
from wq.engine.registry import TickContext, Ticker, TypeRegistry
from wq.engine.runner import ItemRunner
from wq.engine.scheduler import LOCKED_RETRY_SECONDS, Scheduler
from wq.engine.sweep import sweep_once
from wq.engine.wakeup import WAKEUP_KEY, Wakeup

__all__ = ["ProcessingManager", "backoff_delay", "default_owner"]

log = logging.getLogger(__name__)

# After the grace: how long the engine's own threads get to notice and end.
STOP_STEP_SECONDS = 1.0


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
        self._scheduler = Scheduler(
            self.sessions,
            self._worker_sessions,
            registry,
            config,
            handoff=self._handoff,
            batch=self._batch,
            batch_threads=self._batch_threads,
            admitter=self._admitter,
            wakeup=self.wakeup,
            failures=self.failures,
            stopping=self._stopping,
            clock=clock,
        )

    # ----------------------------------------------------------------- lifecycle

    def start(self) -> None:
        """Start the scheduler, heartbeat and sweep threads, and the types' periodic work."""
        loops = (
            ("wq-scheduler", self._scheduler.loop),
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
        return self._scheduler.run_once(projects=projects, event_items=event_items)

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
