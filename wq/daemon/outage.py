"""Database outages: answered 503 with `Retry-After`, logged once per outage.

While PostgreSQL is down or hung, every request that needs it fails the same way;
a traceback per request would drown the log. The first failure of an outage logs
one line, a still-failing database one more line a minute, and the first success
after it one line saying how many requests were refused meanwhile. Only a request
that used the database ends an outage (`used_database`): `wq whoami` answered from
the local token says nothing about the database.
"""

from __future__ import annotations

import logging
from contextvars import ContextVar
from typing import Any

from sqlalchemy import Engine, event
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from wq.engine.outage import Outage

log = logging.getLogger("wq.daemon")

RETRY_AFTER_SECONDS = 5

# The request being answered, while an outage lasts: whether it used the database. A
# list, so that the threads a request's work runs on (which get a copy of the context)
# mark the request's own.
_request_used_database: ContextVar[list[bool] | None] = ContextVar(
    "wq_request_used_database", default=None
)


def used_database() -> None:
    """Note that the request being answered took a database connection."""
    marker = _request_used_database.get()
    if marker is not None:
        marker[0] = True


def _checked_out(*_: Any) -> None:
    used_database()


def note_checkouts(engine: Engine) -> None:
    """Every connection `engine`'s pool hands out is noted (`used_database`); once per
    engine, however many apps are built on it."""
    if not event.contains(engine, "checkout", _checked_out):
        event.listen(engine, "checkout", _checked_out)


class OutageLog(Outage):
    """The API's outages: requests refused with 503, counted and logged once per outage."""

    def __init__(self) -> None:
        super().__init__(
            log, during="answering 503 until it is back", counted="requests answered 503"
        )


class OutageWatch:
    """ASGI middleware: an answer that used the database (a success, a 404 or a 409) ends
    an outage."""

    def __init__(self, app: ASGIApp, outage: OutageLog) -> None:
        self.app = app
        self.outage = outage

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if not self.outage.active or not (path.startswith("/api/") or path == "/readyz"):
            await self.app(scope, receive, send)
            return

        marker = [False]

        async def watch(message: Message) -> None:
            # A success, or a 404 or 409 (found so by reading the database); not a
            # refusal, whose audit row is written, or not, beside the answer.
            status = message["status"] if message["type"] == "http.response.start" else 0
            if (200 <= status < 400 or status in (404, 409)) and marker[0]:
                self.outage.succeeded()
            await send(message)

        noted = _request_used_database.set(marker)
        try:
            await self.app(scope, receive, watch)
        finally:
            _request_used_database.reset(noted)
