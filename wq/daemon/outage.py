"""Database outages: answered 503 with `Retry-After`, logged once per outage.

While PostgreSQL is down or hung, every request that needs it fails the same way;
a traceback per request would drown the log. The first failure of an outage logs
one line, a still-failing database one more line a minute, and the first success
after it one line saying how many requests were refused meanwhile.
"""

from __future__ import annotations

import logging
import threading
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from wq.engine.outage import REPEAT_SECONDS, describe

log = logging.getLogger("wq.daemon")

RETRY_AFTER_SECONDS = 5


class OutageLog:
    """Counts refused requests and logs the start, the persistence and the end of an outage."""

    def __init__(self, repeat_seconds: float = REPEAT_SECONDS) -> None:
        self._lock = threading.Lock()
        self._repeat = repeat_seconds
        self._since: float | None = None
        self._last_line = 0.0
        self._refused = 0

    @property
    def active(self) -> bool:
        """True between the first failure and the next success."""
        return self._since is not None

    def failed(self, err: BaseException) -> None:
        """Note one request refused because the database is unavailable."""
        now = time.monotonic()
        with self._lock:
            self._refused += 1
            if self._since is None:
                self._since, self._last_line = now, now
                log.warning(
                    "database unavailable (%s); answering 503 until it is back", describe(err)
                )
            elif now - self._last_line >= self._repeat:
                self._last_line = now
                log.warning(
                    "database still unavailable after %.0fs, %d requests answered 503 (%s)",
                    now - self._since,
                    self._refused,
                    describe(err),
                )

    def succeeded(self) -> None:
        """Note a request that used the database; ends an outage."""
        if self._since is None:
            return
        with self._lock:
            if self._since is None:
                return
            log.info(
                "database answering again after %.0fs; %d requests were answered 503",
                time.monotonic() - self._since,
                self._refused,
            )
            self._since, self._refused = None, 0


class OutageWatch:
    """ASGI middleware: a successful answer on a database route ends an outage."""

    def __init__(self, app: ASGIApp, outage: OutageLog) -> None:
        self.app = app
        self.outage = outage

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if not self.outage.active or not (path.startswith("/api/") or path == "/readyz"):
            await self.app(scope, receive, send)
            return

        async def watch(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] < 400:
                self.outage.succeeded()
            await send(message)

        await self.app(scope, receive, watch)
