"""Batches of cheap actions taken by the scheduler, run on threads of their own.

The scheduler's pass takes a batch (`wq.engine.batch.BatchRunner`) in the background:
on a thread of its own that holds one of `BATCHES_IN_FLIGHT` slots until it ends, so
that while one batch waits for the database the scheduler takes the next and another
runs its Python. What a batch hands on (actions that are not cheap) goes to the free
workers. The processing manager's shutdown waits for the batch threads on the same
condition as for its workers.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime

from wq.engine.batch import BatchRunner
from wq.engine.config import ProcessingConfig
from wq.engine.handoff import WorkerHandoff, monotonic_due
from wq.engine.outage import EngineFailures
from wq.engine.wakeup import Wakeup

# Batches of cheap actions in flight at once: while one waits for the database, the
# scheduler claims the next and another batch runs its Python.
BATCHES_IN_FLIGHT = 2
# After a batch failed, the pass that takes its items again comes this much later.
BATCH_RETRY_SECONDS = 1.0
# How long a pass waits at a time for a batch slot, looking for shutdown in between.
SLOT_WAIT_SECONDS = 1.0


class BatchThreads:
    """Takes batches of cheap actions, in the background or at once.

    `returned` is the manager's condition: it guards `running` (batch threads that have
    not ended) and is notified when one ends.
    """

    def __init__(
        self,
        runner: BatchRunner,
        handoff: WorkerHandoff,
        settings: ProcessingConfig,
        *,
        owner: str,
        clock: Callable[[], datetime],
        wakeup: Wakeup,
        failures: EngineFailures,
        stopping: threading.Event,
        returned: threading.Condition,
    ) -> None:
        self.runner = runner
        self._handoff = handoff
        self._settings = settings
        self._owner = owner
        self._clock = clock
        self._wakeup = wakeup
        self._failures = failures
        self._stopping = stopping
        self._returned = returned
        self.slots = threading.BoundedSemaphore(BATCHES_IN_FLIGHT)
        self.running = 0  # batch threads (under `returned`)
        # Monotonic time an admitted item of the batches' types comes due (a lease or
        # a backoff runs out), as the last batch saw; the hand-off keeps the workers'.
        self.due: float | None = None
        # Monotonic time the scheduler's current wait ends (infinite while it works
        # the wait out): a batch whose work comes due sooner wakes it.
        self.waking_at = 0.0

    def start(self, *, background: bool) -> int:
        """Take a batch of cheap actions, in the background or now; return how many
        items it took (none yet in the background)."""
        if not self.runner.cheap_types or self._stopping.is_set():
            return 0
        # A batch slot first (waiting, if need be, for a batch in flight to end).
        while not self.slots.acquire(timeout=SLOT_WAIT_SECONDS):
            if self._stopping.is_set():
                return 0
        if not background:
            try:
                return self.run(background=False)
            finally:
                self.slots.release()
        with self._returned:
            if self._stopping.is_set():  # stop may have looked for running batches
                self.slots.release()
                return 0
            self.running += 1
        try:
            threading.Thread(target=self._in_background, name="wq-batch", daemon=True).start()
        except BaseException:
            self._ended()
            raise
        return 0

    def run(self, *, background: bool) -> int:
        """Take and run a batch of cheap actions, start workers for what it handed off.

        In the background a full batch wakes the scheduler at once, so that the next
        batch is taken while this one runs.
        """
        now = self._clock()
        taken = self.runner.take(
            self._owner,
            limit=self._settings.batch_size,
            on_full=self._more_to_take if background else None,
        )
        due = self.due = monotonic_due(taken.due, now)
        if taken.handoff:
            with self._handoff.claim_lock:
                self._handoff.hand_over(taken.handoff, self._handoff.free)
        if background and due is not None and due < self.waking_at:
            # Work comes due before the scheduler's wait ends (this batch's backoffs and
            # holds signal nothing): it must look again. Else this wakes nobody.
            self._more_to_take()
        return taken.taken

    def _more_to_take(self) -> None:
        """The next pass comes at once, unless items wait for a worker (that pass
        would take the same items again; a worker that returns wakes it)."""
        if not self._handoff.surplus_waiting:
            self._wakeup.poke()

    def _in_background(self) -> None:
        """A batch thread: it owns a batch slot until it ends."""
        try:
            self.run(background=True)
        except Exception as err:
            self._failures.failed("batch", err)
            # What its pass admitted is left for it: the next pass looks again soon
            # (not at once: a batch that keeps failing would spin).
            if not self._stopping.wait(BATCH_RETRY_SECONDS):
                self._wakeup.poke()
        finally:
            self._ended()

    def _ended(self) -> None:
        self.slots.release()
        with self._returned:
            self.running -= 1
            self._returned.notify_all()
