"""Admission passes beside the scheduler's claims, on a thread of their own.

On PostgreSQL the scheduler thread claims for the workers while this thread admits:
two transactions on two connections that overlap, instead of one pass doing both in
turn. A backlog's admissions (about `ADMISSIONS_PER_PASS` a pass, each tens of
milliseconds of row and index updates) then no longer hold up the claims the workers
wait for. What a pass admits wakes the scheduler (`ITEMS_ADMITTED`), which claims it.

One pass runs at a time. Projects signalled meanwhile wait for it and go in the next,
which follows at once. What each pass found (projects held up by a row another
transaction holds, projects with more queued than it could admit) is handed back to
the scheduler (`take_results`), which keeps that bookkeeping on its own thread; the
first come back at once, the held ones a little later (the lock's end wakes nobody).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy.orm import Session, sessionmaker

from wq.engine.admission import AdmissionPass
from wq.engine.config import Config
from wq.engine.outage import EngineFailures
from wq.engine.wakeup import PROJECT_QUEUED, Wakeup

# How long the admission thread waits for a pass before it ends (the next starts it).
IDLE_SECONDS = 30.0


@dataclass
class AdmitterResults:
    """What the passes since the scheduler last looked found.

    `passed`: each pass's projects (None: every project) and those of them held up;
    `more`: projects where a lane took its whole share; `failed`: projects of passes
    that failed, to be looked at again (a failed pass over every project waits for
    the poll's).
    """

    passed: list[tuple[set[str] | None, set[str]]] = field(default_factory=list)
    more: set[str] = field(default_factory=set)
    failed: set[str] = field(default_factory=set)


class Admitter:
    """Runs admission passes, one at a time, on a thread beside the scheduler.

    The thread starts with the first pass asked for and serves pass after pass; it
    ends once it has waited `IDLE_SECONDS` for one, or at shutdown. Asking for a pass
    never waits for the thread: starting one waits until it runs, and the scheduler,
    whose claims the workers wait for, would wait behind every busy worker for that.
    """

    def __init__(
        self,
        sessions: sessionmaker[Session],
        config: Config,
        *,
        clock: Callable[[], datetime],
        wakeup: Wakeup,
        failures: EngineFailures,
        stopping: threading.Event,
        held_retry_seconds: float,
        idle_seconds: float = IDLE_SECONDS,
    ) -> None:
        self._sessions = sessions
        self._config = config
        self._clock = clock
        self._wakeup = wakeup
        self._failures = failures
        self._stopping = stopping
        self._held_retry_seconds = held_retry_seconds
        self._idle_seconds = idle_seconds
        self._cond = threading.Condition(threading.Lock())
        self._thread: threading.Thread | None = None  # the thread serving passes, if any
        self._closed = False
        self._next: set[str] = set()  # projects for the next pass
        self._next_resync = False  # the next pass looks at every project
        self._results = AdmitterResults()

    def admit(self, projects: set[str] | None) -> None:
        """Admit in these projects (None: every project with queued work): now, or
        right after the pass that is running."""
        with self._cond:
            if self._stopping.is_set() or self._closed:
                return
            if projects is None:
                self._next_resync = True
            else:
                self._next |= projects
            if self._thread is not None:
                self._cond.notify()
                return
            self._thread = threading.Thread(target=self._serve, name="wq-admission", daemon=True)
            self._thread.start()

    def take_results(self) -> AdmitterResults:
        """What the passes found since the last call (the scheduler's thread)."""
        with self._cond:
            results, self._results = self._results, AdmitterResults()
        return results

    def join(self, timeout: float) -> None:
        """Stop serving passes; wait up to `timeout` seconds for the one running."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def _serve(self) -> None:
        """Pass after pass, each as soon as it is asked for; end when idle or stopping."""
        while True:
            with self._cond:
                while not (self._next or self._next_resync):
                    if self._stopping.is_set() or self._closed:
                        break
                    if not self._cond.wait(self._idle_seconds):
                        break
                if self._stopping.is_set() or self._closed or not (self._next or self._next_resync):
                    self._thread = None
                    return
                projects = None if self._next_resync else self._next
                self._next, self._next_resync = set(), False
            self._pass(projects)

    def _pass(self, projects: set[str] | None) -> None:
        held: set[str] = set()
        admission = AdmissionPass(
            self._config, projects, clock=self._clock, held=held, wake_self=True
        )
        failed = False
        try:
            with self._sessions.begin() as session:
                admission.run(session)
            self._failures.succeeded()
        except Exception as err:
            failed = True
            self._failures.failed("admission pass", err)
        with self._cond:
            if failed:
                # Its projects, and those asked for meanwhile, wait for the next pass
                # something else wakes, or the poll (a pass now would fail the same way,
                # again and again).
                self._results.failed |= (projects or set()) | self._next
                self._next, self._next_resync = set(), False
            else:
                self._results.passed.append((projects, held))
                self._results.more |= admission.more
                self._retry_held(held)
            # With no pass asked for meanwhile, more queued than this one admitted
            # needs one at once.
            tell = not failed and bool(admission.more) and not (self._next or self._next_resync)
        if tell:
            self._wakeup.poke()

    def _retry_held(self, held: set[str]) -> None:
        """Projects whose queue head another transaction holds are looked at again
        `held_retry_seconds` from now (the lock's end wakes nobody)."""
        for project in held:
            self._wakeup.deliver_later(PROJECT_QUEUED, project, self._held_retry_seconds)
