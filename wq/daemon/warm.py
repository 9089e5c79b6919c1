"""Warm-up at start: what the first requests would otherwise set up while others queue.

Measured on a fresh daemon: its first request took 50-80 ms against 3 ms later on:
FastAPI works out each route's settings the first time a request is matched against it
(about 3 ms a route), anyio imports its event-loop backend on first use, and the
database pool opens its connections one request at a time. A replica that joins under
load answers its first second late without this (`benchmarks/api.py` from a cold start).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import Any

from anyio import to_thread
from sqlalchemy import Engine
from starlette.types import ASGIApp, Message

log = logging.getLogger("wq.daemon")


def _open_connections(engine: Engine, count: int) -> None:
    """Open `count` connections of the pool at once and give them back to it."""
    with contextlib.ExitStack() as stack:
        for _ in range(count):
            stack.enter_context(engine.connect())


# A path no route has: matching it goes through every route once.
NO_ROUTE = "/.wq-warm-up"


async def _match_every_route(router: ASGIApp) -> None:
    """Send the router (not the app: no middleware, no audit, no metrics) a request
    that no route takes, so that each route is matched once and its 404 dropped."""
    scope: dict[str, Any] = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": NO_ROUTE,
        "raw_path": NO_ROUTE.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [],
        "client": ("127.0.0.1", 0),
        "server": ("127.0.0.1", 0),
    }

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        pass

    with contextlib.suppress(Exception):  # the router's 404, as an exception or an answer
        await router(scope, receive, send)


async def warm_up(
    router: ASGIApp, engine: Engine, connections: int, document: Callable[[], object]
) -> None:
    """Match every route once, start a worker thread (anyio's backend with it), open
    the pool's connections and build the OpenAPI document (`document`).

    The document is built on its first request otherwise (0.3 s and more): the CLI's
    shell completion asks for it with a one-second budget and offered no types then.
    Best effort: a database that does not answer now is the first requests' to meet.
    """
    await _match_every_route(router)
    try:
        await to_thread.run_sync(_open_connections, engine, connections)
    except Exception as err:
        log.warning("warm-up: could not open the database connections: %s", err)
    try:
        await to_thread.run_sync(document)
    except Exception as err:  # its request answers the error, as before the warm-up
        log.warning("warm-up: could not build the OpenAPI document: %s", err)
