"""Load shedding: past a backlog of requests in progress, answer 503 at once.

Most of the API's handlers run in anyio's thread pool (`server.request_threads`
threads); the hot reads await the database on the event loop (`wq.daemon.loop_reads`).
A load beyond what the daemon can answer queues (for those threads, for the event
loop, for database connections), and an open-loop load (independent clients) lets the
queue grow without bound: every request is then answered seconds late, after its
client gave up, and the work done for it is wasted. So a request that arrives while
`server.max_waiting_requests` already wait for a thread, or while
`server.request_threads` + `server.max_waiting_requests` requests are in progress, is
answered 503 with `Retry-After` on the event loop, before its body is read or its
caller authenticated: cheap, and at once. The clients that are answered are answered
in time, and the others know to come back.

Not shed: the probes and the scrape (`/healthz` answers on the event loop; `/readyz`
and `/metrics` must tell the platform what is going on), and GitLab's webhooks
(GitLab does not deliver a refused event again). A backlog is logged once when
shedding starts, once a minute while it lasts, and once when it ends (a request let in
`QUIET_SECONDS` after the last refusal), with a count.
"""

from __future__ import annotations

import asyncio
import json
import logging

from anyio import CapacityLimiter, to_thread
from prometheus_client import Counter
from starlette.types import ASGIApp, Receive, Scope, Send

from wq.engine.outage import Episode

log = logging.getLogger("wq.daemon")

RETRY_AFTER_SECONDS = 1
# Paths that are never shed (exact paths, and prefixes).
NEVER_SHED = frozenset({"/healthz", "/readyz", "/metrics"})
NEVER_SHED_PREFIXES = ("/api/webhooks/",)
# Streams that stay open as long as their reader follows (a task's output): shed at
# their start like any request, but not counted as in progress afterwards; they wait
# on their own thread each, and their number has its own bound (`wq.daemon.streams`).
STREAM_SUFFIXES = ("/logs",)
# An overload ends this long after its last refusal: under a sustained one, requests
# are let in between refusals, and each would otherwise end and begin an episode.
QUIET_SECONDS = 10.0


def backlog() -> Episode:
    """Shedding episodes: logged when they start, once a minute, and when they end."""
    return Episode(
        log,
        began="overloaded: {detail}; answering 503",
        lasting="still overloaded after {seconds:.0f}s: {count} requests answered 503",
        ended="no longer overloaded after {seconds:.0f}s; {count} requests answered 503",
        quiet_seconds=QUIET_SECONDS,
    )


# When to send it again is the Retry-After header's to say (wq's client says it once).
_BODY = json.dumps({"error": "the daemon is overloaded"}).encode()
_HEADERS = [
    (b"content-type", b"application/json"),
    (b"content-length", str(len(_BODY)).encode()),
    (b"retry-after", str(RETRY_AFTER_SECONDS).encode()),
]


class LoadShedding:
    """ASGI middleware: 503 for a request that would wait behind `max_waiting` others
    for one of `threads` threads (it sizes the event loop's thread pool to that), or
    that would make more than `threads + max_waiting` requests in progress."""

    def __init__(
        self, app: ASGIApp, *, threads: int, max_waiting: int, backlog: Episode, shed: Counter
    ) -> None:
        self.app = app
        self.threads = threads
        self.max_waiting = max_waiting
        self.backlog = backlog
        self.shed = shed  # the count of requests refused
        self._sized_loop: asyncio.AbstractEventLoop | None = None
        self._limiter: CapacityLimiter | None = None
        self.in_progress = 0  # requests that may be shed, let in and not answered yet

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            # anyio's default limiter: the pool FastAPI runs sync handlers in, one per
            # loop. Sized once, at the first request its loop serves (finding it cost
            # every request a few microseconds).
            loop, limiter = asyncio.get_running_loop(), self._limiter
            if limiter is None or loop is not self._sized_loop:
                limiter = self._limiter = to_thread.current_default_thread_limiter()
                limiter.total_tokens = self.threads
                self._sized_loop = loop
            path = scope["path"]
            if path not in NEVER_SHED and not path.startswith(NEVER_SHED_PREFIXES):
                await self._shed_or_serve(limiter, scope, receive, send)
                return
        await self.app(scope, receive, send)

    async def _shed_or_serve(
        self, limiter: CapacityLimiter, scope: Scope, receive: Receive, send: Send
    ) -> None:
        waiting = limiter.statistics().tasks_waiting
        if waiting >= self.max_waiting or self.in_progress >= self.threads + self.max_waiting:
            self.backlog.occurred(
                f"{self.in_progress} requests in progress, {waiting} waiting for a thread"
            )
            self.shed.inc()
            await send({"type": "http.response.start", "status": 503, "headers": _HEADERS})
            await send({"type": "http.response.body", "body": _BODY})
            return
        if self.backlog.active:
            self.backlog.ended()
        if scope["path"].endswith(STREAM_SUFFIXES):
            await self.app(scope, receive, send)
            return
        self.in_progress += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_progress -= 1


class CallerShare:
    """How many request bodies each caller is sending at once, bounded per caller.

    A request holds one of the places `LoadShedding` lets in while its body arrives,
    and a caller may send it as slowly as `server.body_timeout_seconds` allows: one
    caller with enough slow bodies held every place, and every other caller's requests
    were answered 503. Bounding each caller's bodies in transit to a share of the
    places leaves the rest to the others (a body that arrives at once is in transit
    for microseconds, so the bound is felt only by a caller that sends slowly).
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._sending: dict[tuple[str, str], int] = {}

    def enter(self, caller: tuple[str, str]) -> bool:
        """Count one more body from `caller`; False (nothing counted) past its share."""
        sending = self._sending.get(caller, 0)
        if sending >= self.limit:
            return False
        self._sending[caller] = sending + 1
        return True

    def leave(self, caller: tuple[str, str]) -> None:
        """One body of `caller` has arrived (or will not)."""
        sending = self._sending[caller] - 1
        if sending:
            self._sending[caller] = sending
        else:
            del self._sending[caller]
