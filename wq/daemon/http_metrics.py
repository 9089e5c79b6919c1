"""HTTP metrics: requests, durations and requests in progress, by route template.

The route label is the template of the route a request matches, never its path, so
label values stay few whatever callers send: path parameters appear as `{name}`, and
identifiers (`{item_id}`, any `*_id`) as `{id}`, so `/api/work-items/<uuid>/history`
is `/api/work-items/{id}/history`. A path no route matches is `unmatched`, and an
unusual method is `other`. The probes and the scrape itself (`/healthz`, `/readyz`,
`/metrics`) are not counted: they come every few seconds from the platform and would
drown the API's own traffic.

A pure ASGI middleware, outermost of the daemon's, so refusals answered by the body
guard or the auth layer are counted like any other answer. It matches the request
against the routes itself, before the app runs: the body guard answers some requests
before any routing, and the route the app picked is not reliably left in the scope.
The label of a recent method and path is remembered, so that the webhook's stream is
matched once.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence

from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from wq.engine.metrics import Metrics

EXCLUDED_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
UNMATCHED = "unmatched"
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
# Labels of recent paths kept, so that a busy path (a webhook) is matched against the
# routes once; emptied when full (paths that carry ids would fill it without end). A
# longer path is matched each time: a caller's long paths take no memory here.
MAX_REMEMBERED_PATHS = 1024
MAX_REMEMBERED_PATH_LENGTH = 256
_PARAM = re.compile(r"\{([^}:]+)(?::[^}]*)?\}")


def normalize_template(template: str) -> str:
    """A route template as a label: converters dropped, identifier parameters as `{id}`."""

    def name(match: re.Match[str]) -> str:
        param = match.group(1)
        return "{id}" if param == "id" or param.endswith("_id") else f"{{{param}}}"

    return _PARAM.sub(name, template)


def route_label(scope: Scope, routes: Sequence[tuple[BaseRoute, str]]) -> str:
    """The label of the route this request matches (`unmatched` if none), of `routes`
    given with their labels.

    A route that matches the path but not the method (a 405) still names the route.
    """
    partial: str | None = None
    for route, label in routes:
        match, _ = route.matches(scope)
        if match is Match.FULL:
            return label
        if match is Match.PARTIAL and partial is None:
            partial = label
    return UNMATCHED if partial is None else partial


class HttpMetrics:
    """ASGI middleware counting every HTTP request but the probes and the scrape."""

    def __init__(self, app: ASGIApp, *, metrics: Metrics, routes: Sequence[BaseRoute]) -> None:
        self.app = app
        self.metrics = metrics
        # Routes with a template, in the order the app tries them, with their labels.
        self.routes = [
            (route, normalize_template(template))
            for route in routes
            if isinstance(template := getattr(route, "path", None), str)
        ]
        self._labels: dict[tuple[str, str, str], str] = {}

    def label(self, scope: Scope) -> str:
        """The route label of this request, remembered by method and path."""
        path = scope.get("path", "")
        if len(path) > MAX_REMEMBERED_PATH_LENGTH:
            return route_label(scope, self.routes)
        key = (scope.get("method", ""), scope.get("root_path", ""), path)
        label = self._labels.get(key)
        if label is None:
            label = route_label(scope, self.routes)
            if len(self._labels) >= MAX_REMEMBERED_PATHS:
                self._labels.clear()
            self._labels[key] = label
        return label

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") in EXCLUDED_PATHS:
            await self.app(scope, receive, send)
            return
        method = scope.get("method", "")
        method = method if method in METHODS else "other"
        route = self.label(scope)
        status = 500  # unless the app answers: an exception escaping it is a 500
        metrics = self.metrics

        async def send_and_note(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        in_progress = metrics.child(metrics.http_in_progress, method, route)
        in_progress.inc()
        started = time.perf_counter()
        try:
            await self.app(scope, receive, send_and_note)
        finally:
            in_progress.dec()
            elapsed = time.perf_counter() - started
            metrics.child(metrics.http_duration, method, route).observe(elapsed)
            metrics.child(metrics.http_requests, method, route, str(status)).inc()
