"""Database outages: answered 503 with `Retry-After`, logged once per outage.

While PostgreSQL is down or hung, every request that needs it fails the same way;
a traceback per request would drown the log. The first failure of an outage logs
one line, a still-failing database one more line a minute, and the first success
after it one line saying how many requests were refused meanwhile.
"""

from __future__ import annotations

import logging

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from wq.engine.outage import Outage

log = logging.getLogger("wq.daemon")

RETRY_AFTER_SECONDS = 5


class OutageLog(Outage):
    """The API's outages: requests refused with 503, counted and logged once per outage."""

    def __init__(self) -> None:
        super().__init__(
            log, during="answering 503 until it is back", counted="requests answered 503"
        )


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
