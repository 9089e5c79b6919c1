"""PostgreSQL `LISTEN`: wake this replica when another one commits new work."""

from __future__ import annotations

import logging
import threading

import psycopg
from sqlalchemy import Engine

from wq.engine.db import DEFAULT_TIMEOUTS, Timeouts, connect_postgres
from wq.engine.outage import Episode, describe
from wq.engine.store import NOTIFY_CHANNEL
from wq.engine.wakeup import Wakeup

log = logging.getLogger(__name__)
# After a NOTIFY wakes the listener, the rest of its burst (every replica's intake and
# releases NOTIFY, this one's own included) is waited for this long and taken in one
# go: a wake-up per NOTIFY cost the thread about 50 us of CPU each under a stream of
# webhook events.
NOTIFY_GATHER_SECONDS = 0.003


class NotifyListener:
    """A thread holding one autocommit connection that listens on the wq channel.

    After every (re)connect, once `LISTEN` has run, it asks the scheduler for a full
    admission pass: whatever was signalled while nobody listened is picked up then.
    """

    def __init__(
        self, engine: Engine, wakeup: Wakeup, timeouts: Timeouts = DEFAULT_TIMEOUTS
    ) -> None:
        url = engine.url.set(drivername="postgresql")
        # Bounded connect and LISTEN, so that a hung server cannot hold this thread.
        self._timeouts = timeouts
        self._dsn = url.render_as_string(hide_password=False)
        self._wakeup = wakeup
        self._stopping = threading.Event()
        self._listening = threading.Event()
        self._thread = threading.Thread(target=self._run, name="wq-listen", daemon=True)
        # One line when the connection is lost, one a minute while it stays lost (not
        # one per attempt), one when LISTEN is back.
        self._lost = Episode(
            log,
            began="LISTEN connection lost ({detail}); reconnecting",
            lasting="LISTEN connection still lost after {seconds:.0f}s, {count} attempts"
            " ({detail})",
            ended="LISTEN connection back after {seconds:.0f}s",
        )

    def start(self) -> None:
        """Start listening in the background."""
        self._thread.start()

    def wait_ready(self, timeout: float) -> bool:
        """Block until `LISTEN` is in effect (False if that took longer than `timeout`)."""
        return self._listening.wait(timeout)

    @property
    def listening(self) -> bool:
        """Whether `LISTEN` is in effect right now."""
        return self._listening.is_set()

    def stop(self) -> None:
        """Stop listening (within about a second)."""
        self._stopping.set()
        self._thread.join(timeout=2)

    def _deliver(self, notes: list[psycopg.Notify]) -> None:
        """Hand the hub what other hubs signalled (it knows its own signals already)."""
        origin = self._wakeup.origin
        payloads = [
            payload
            for sender, _, payload in (note.payload.partition("|") for note in notes)
            if sender != origin
        ]
        if payloads:
            self._wakeup.deliver_payload(*payloads)

    def _run(self) -> None:
        backoff = 0.5
        while not self._stopping.is_set():
            try:
                with connect_postgres(self._dsn, self._timeouts, autocommit=True) as conn:
                    conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
                    backoff = 0.5
                    self._listening.set()
                    self._lost.ended()
                    # Anything may have happened while we were not listening.
                    self._wakeup.resync()
                    while not self._stopping.is_set():
                        notes = list(conn.notifies(timeout=1.0, stop_after=1))
                        if notes and not self._stopping.wait(NOTIFY_GATHER_SECONDS):
                            notes.extend(conn.notifies(timeout=0))
                        self._deliver(notes)
            except psycopg.Error as err:
                self._listening.clear()
                self._lost.occurred(describe(err))
                self._stopping.wait(backoff)
                backoff = min(backoff * 2, 30.0)
        self._listening.clear()
