"""A bounded pool of persistent worker threads.

A thread is started only when an item arrives and no thread is idle, never more than
`size` of them, and each serves item after item: no thread is started per item. A
thread idle for `idle_seconds` ends (a manager that stopped claiming leaves none
behind for long). Threads are daemon threads: past the shutdown grace the process can
exit without waiting for an action that is still running. A thread that finds no job
waiting calls `idle(slot)` before it waits (the hand-off stores what the thread's
items wrote then).
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

Job = TypeVar("Job")

IDLE_SECONDS = 30.0


class WorkerPool(Generic[Job]):
    """Runs `work(job, slot)` for each submitted job on one of at most `size` threads.

    `slot` (0 to size-1) names the thread; no two threads alive share one. Jobs beyond
    the threads wait in line for the first thread free.
    """

    def __init__(
        self,
        work: Callable[[Job, int], None],
        size: int,
        *,
        idle: Callable[[int], None] | None = None,
        name: str = "wq-worker",
        idle_seconds: float = IDLE_SECONDS,
    ) -> None:
        self._work = work
        self._on_idle = idle
        self._size = size
        self._name = name
        self._idle_seconds = idle_seconds
        self._jobs: collections.deque[Job] = collections.deque()
        self._cond = threading.Condition(threading.Lock())
        self._idle = 0  # threads waiting for a job
        self._free_slots = list(range(size - 1, -1, -1))
        self._closed = False

    @property
    def threads(self) -> int:
        """How many worker threads are alive."""
        with self._cond:
            return self._size - len(self._free_slots)

    def submit(self, *jobs: Job) -> None:
        """Queue jobs, in order; idle threads take them, else new ones while the pool
        has room.

        Jobs beyond the threads wait in line for the first that is done. Many jobs go
        in under one hold of the pool's lock: a claim's items are handed over at once,
        not one by one against the threads that are already taking them. Should a
        thread fail to start, the error is raised and the jobs stay in line.
        """
        with self._cond:
            if self._closed:
                raise RuntimeError("the worker pool is closed")
            self._jobs.extend(jobs)
            # Idle threads notified and not yet awake still count as idle, each with
            # one of the jobs in line.
            self._cond.notify(min(self._idle, len(jobs)))
            wanted = min(len(self._jobs) - self._idle, len(self._free_slots))
            slots = [self._free_slots.pop() for _ in range(max(wanted, 0))]
        for index, slot in enumerate(slots):
            try:
                threading.Thread(
                    target=self._serve, args=(slot,), name=f"{self._name}-{slot}", daemon=True
                ).start()
            except BaseException:
                with self._cond:
                    self._free_slots.extend(slots[index:])
                raise

    def take_waiting(self) -> list[Job]:
        """Remove the jobs no thread has taken yet, and return them."""
        with self._cond:
            jobs = list(self._jobs)
            self._jobs.clear()
        return jobs

    def close(self) -> None:
        """No more jobs; idle threads end now, busy ones once their job is done."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def _serve(self, slot: int) -> None:
        try:
            while True:
                with self._cond:
                    job = self._jobs.popleft() if self._jobs else None
                if job is None:
                    if self._on_idle is not None:
                        self._on_idle(slot)
                    with self._cond:
                        while not self._jobs:
                            if self._closed:
                                return
                            self._idle += 1
                            try:
                                woke = self._cond.wait(self._idle_seconds)
                            finally:
                                self._idle -= 1
                            if not woke and not self._jobs:
                                return
                        job = self._jobs.popleft()
                self._work(job, slot)
        finally:
            with self._cond:
                self._free_slots.append(slot)
                if self._jobs and not self._closed:
                    # A job queued while this thread was leaving: serve it on.
                    slot = self._free_slots.pop()
                    threading.Thread(
                        target=self._serve, args=(slot,), name=f"{self._name}-{slot}", daemon=True
                    ).start()
