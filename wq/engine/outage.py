"""Telling a database outage from a bug, and logging an outage once, not per failure.

While PostgreSQL is down or hung every loop of the engine (scheduler, heartbeat, sweep,
periodic work, workers) fails the same way, several times a second; a traceback each
time would drown the log. A bug still gets its traceback. `Episode` is the logging of
any such trouble (the API's overloads use it too, see `wq.daemon.shedding`).
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


# PostgreSQL's "undefined table" and "undefined column": the schema is not there (a
# database dropped and made again, a restore) until `wq db migrate` runs.
SCHEMA_MISSING_STATES = frozenset({"42P01", "42703"})


def is_schema_missing(err: BaseException) -> bool:
    """True for an error that says the database lacks the schema wq needs."""
    return isinstance(err, sa_exc.ProgrammingError) and (
        getattr(err.orig, "sqlstate", None) in SCHEMA_MISSING_STATES
    )


def is_unavailable(err: BaseException) -> bool:
    """True for an error that says the database cannot be used (unreachable, or without
    its schema), not that the work is bad."""
    if isinstance(err, UNAVAILABLE_ERRORS) or is_schema_missing(err):
        return True
    return isinstance(err, sa_exc.DBAPIError) and bool(err.connection_invalidated)


def describe(err: BaseException) -> str:
    """One line naming the failure (driver messages can span several lines)."""
    cause = getattr(err, "orig", None) or err
    text = str(cause).strip().splitlines()
    return f"{type(cause).__name__}: {text[0] if text else ''}".rstrip(": ")


class Episode:
    """A trouble that begins, lasts and ends (an outage, an overload), logged as three
    kinds of line: when it begins, once every `repeat_seconds` while it lasts, and when
    it ends, with the count of what it cost.

    The lines are templates: `began` takes `{detail}`, `lasting` `{seconds}`, `{count}`
    and `{detail}`, `ended` `{seconds}` and `{count}`. With `quiet_seconds`, `ended`
    ends an episode only that long after its last occurrence: a trouble whose
    occurrences come between successes (an overload) is one episode, not a pair of
    lines each time.
    """

    def __init__(
        self,
        log: logging.Logger,
        *,
        began: str,
        lasting: str,
        ended: str,
        repeat_seconds: float = REPEAT_SECONDS,
        quiet_seconds: float = 0.0,
    ) -> None:
        self.log = log
        self._began, self._lasting, self._ended = began, lasting, ended
        self._repeat = repeat_seconds
        self._quiet = quiet_seconds
        self._last_occurrence = 0.0
        self._lock = threading.Lock()
        self._since: float | None = None
        self._last_line = 0.0
        self._count = 0

    @property
    def active(self) -> bool:
        """True between the first occurrence and the next `ended`."""
        return self._since is not None

    def occurred(self, detail: str) -> None:
        """Count one occurrence (a failure, a refusal); `detail` says what happened."""
        now = time.monotonic()
        with self._lock:
            self._count += 1
            self._last_occurrence = now
            if self._since is None:
                self._since, self._last_line = now, now
                self.log.warning(self._began.format(detail=detail))
            elif now - self._last_line >= self._repeat:
                self._last_line = now
                seconds = now - self._since
                self.log.warning(
                    self._lasting.format(seconds=seconds, count=self._count, detail=detail)
                )

    def ended(self) -> None:
        """The trouble is over (a success, a request let in); nothing if there was none
        or its last occurrence is more recent than `quiet_seconds`."""
        if self._since is None:
            return
        now = time.monotonic()
        with self._lock:
            if self._since is None or now - self._last_occurrence < self._quiet:
                return
            seconds = now - self._since
            self.log.info(self._ended.format(seconds=seconds, count=self._count))
            self._since, self._count = None, 0


class Outage(Episode):
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
        super().__init__(
            log,
            began=f"database unavailable ({{detail}}); {during}",
            lasting="database still unavailable after {seconds:.0f}s, {count} "
            + counted
            + " ({detail})",
            ended="database answering again after {seconds:.0f}s; {count} " + counted,
            repeat_seconds=repeat_seconds,
        )

    def failed(self, err: BaseException) -> None:
        """Note one failure because the database is unavailable."""
        self.occurred(describe(err))

    def succeeded(self) -> None:
        """Note a success that used the database; ends an outage."""
        self.ended()


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
