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


class Outage:
    """One database outage at a time: a line when it begins, one a minute, one when it ends.

    `during` says what happens meanwhile ("answering 503 until it is back"); `counted`
    names what the count of failures counts ("requests answered 503").
    """

    def __init__(
        self,
        log: logging.Logger,
        *,
        during: str,
        counted: str,
        repeat_seconds: float = REPEAT_SECONDS,
    ) -> None:
        self.log = log
        self._during = during
        self._counted = counted
        self._repeat = repeat_seconds
        self._lock = threading.Lock()
        self._since: float | None = None
        self._last_line = 0.0
        self._failures = 0

    @property
    def active(self) -> bool:
        """True between the first failure and the next success."""
        return self._since is not None

    def failed(self, err: BaseException) -> None:
        """Note one failure because the database is unavailable."""
        now = time.monotonic()
        with self._lock:
            self._failures += 1
            if self._since is None:
                self._since, self._last_line = now, now
                self.log.warning("database unavailable (%s); %s", describe(err), self._during)
            elif now - self._last_line >= self._repeat:
                self._last_line = now
                self.log.warning(
                    "database still unavailable after %.0fs, %d %s (%s)",
                    now - self._since,
                    self._failures,
                    self._counted,
                    describe(err),
                )

    def succeeded(self) -> None:
        """Note a success that used the database; ends an outage."""
        if self._since is None:
            return
        with self._lock:
            if self._since is None:
                return
            self.log.info(
                "database answering again after %.0fs; %d %s",
                time.monotonic() - self._since,
                self._failures,
                self._counted,
            )
            self._since, self._failures = None, 0


class EngineFailures:
    """Logs the engine's failed passes: a traceback for a bug, an `Outage` otherwise."""

    def __init__(self, log: logging.Logger) -> None:
        self.log = log
        self.outage = Outage(
            log, during="the engine retries until it is back", counted="engine passes failed"
        )

    def failed(self, what: str, err: BaseException) -> None:
        """Note that `what` (e.g. "scheduler pass") failed with `err`."""
        if is_unavailable(err):
            self.outage.failed(err)
        else:
            self.log.error("%s failed", what, exc_info=err)

    def succeeded(self) -> None:
        """Note a pass that used the database; ends an outage."""
        self.outage.succeeded()
