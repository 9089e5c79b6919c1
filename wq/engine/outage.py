"""Telling a database outage from a bug, and logging an outage once, not per failure.

While PostgreSQL is down or hung every loop of the engine (scheduler, heartbeat, sweep,
periodic work, workers) fails the same way, several times a second; a traceback each
time would drown the log. A bug still gets its traceback.
"""

from __future__ import annotations

import logging
import threading
import time

from sqlalchemy import exc as sa_exc

# Errors that mean "the database cannot be used right now" rather than a bug:
# connection refused or lost, statement or answer timeout, no pooled connection left.
UNAVAILABLE_ERRORS: tuple[type[Exception], ...] = (
    sa_exc.OperationalError,
    sa_exc.InterfaceError,
    sa_exc.TimeoutError,
)
REPEAT_SECONDS = 60.0


def is_unavailable(err: BaseException) -> bool:
    """True for an error that says the database is unreachable, not that the work is bad."""
    if isinstance(err, UNAVAILABLE_ERRORS):
        return True
    return isinstance(err, sa_exc.DBAPIError) and bool(err.connection_invalidated)


def describe(err: BaseException) -> str:
    """One line naming the failure (driver messages can span several lines)."""
    cause = getattr(err, "orig", None) or err
    text = str(cause).strip().splitlines()
    return f"{type(cause).__name__}: {text[0] if text else ''}".rstrip(": ")


class EngineFailures:
    """Logs the engine's failed passes: a traceback for a bug, a line per outage.

    The first failure of an outage logs one warning, a still-failing database one more a
    minute, and the first successful pass after it one line with the outage's length.
    """

    def __init__(self, log: logging.Logger, repeat_seconds: float = REPEAT_SECONDS) -> None:
        self.log = log
        self._repeat = repeat_seconds
        self._lock = threading.Lock()
        self._since: float | None = None
        self._last_line = 0.0
        self._failures = 0

    def failed(self, what: str, err: BaseException) -> None:
        """Note that `what` (e.g. "scheduler pass") failed with `err`."""
        if not is_unavailable(err):
            self.log.error("%s failed", what, exc_info=err)
            return
        now = time.monotonic()
        with self._lock:
            self._failures += 1
            if self._since is None:
                self._since, self._last_line = now, now
                self.log.warning(
                    "database unavailable (%s): %s failed; the engine retries until it is back",
                    describe(err),
                    what,
                )
            elif now - self._last_line >= self._repeat:
                self._last_line = now
                self.log.warning(
                    "database still unavailable after %.0fs, %d engine passes failed (%s)",
                    now - self._since,
                    self._failures,
                    describe(err),
                )

    def succeeded(self) -> None:
        """Note a pass that used the database; ends an outage."""
        if self._since is None:
            return
        with self._lock:
            if self._since is None:
                return
            self.log.info(
                "database answering again after %.0fs; the engine resumes",
                time.monotonic() - self._since,
            )
            self._since, self._failures = None, 0
