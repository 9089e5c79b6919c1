"""Direct lanes: the busiest route served through the app's middleware without routing.

A GitLab webhook is the request the daemon answers most often, and most of a request's
CPU there went to layers that do nothing for it: FastAPI's own outer layers, the
router trying routes, and the route's wrappers around its endpoint. `LanedApp` builds,
beside its usual stack, a lane for each `RequestOnlyRoute` of a fixed path: the same
middleware (built from the same list, so a layer added to the app applies to the lane
too), the same exception handlers, and the same answer for an unexpected error (500),
around the endpoint itself. A request with that method and path takes the lane; any
other request the usual stack.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Iterable
from typing import Any, cast

from fastapi import FastAPI
from fastapi.routing import APIRoute
from starlette.middleware.errors import ServerErrorMiddleware
from starlette.middleware.exceptions import ExceptionMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Receive, Scope, Send

Endpoint = Callable[[Request], Coroutine[Any, Any, Response]]


class RequestOnlyRoute(APIRoute):
    """A route whose endpoint takes the request alone and answers a `Response`: it is
    called as it is, without FastAPI's parameter solving or answer validation (the
    OpenAPI document still comes from the route's declaration). With a fixed path it
    gets a lane of its own (`LanedApp`)."""

    def get_route_handler(self) -> Endpoint:
        return cast(Endpoint, self.endpoint)


def _as_asgi(endpoint: Endpoint) -> ASGIApp:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        response = await endpoint(Request(scope, receive))
        await response(scope, receive, send)

    return app


class Lanes:
    """The outermost ASGI app: a request on a lane's method and path takes the lane."""

    def __init__(self, stack: ASGIApp, lanes: dict[tuple[str, str], ASGIApp]) -> None:
        self.stack = stack
        self.lanes = lanes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not scope.get("root_path"):
            lane = self.lanes.get((scope["method"], scope["path"]))
            if lane is not None:
                await lane(scope, receive, send)
                return
        await self.stack(scope, receive, send)


class LanedApp(FastAPI):
    """FastAPI with a direct lane for each `RequestOnlyRoute` of a fixed path it is
    given (`add_lanes`): the app's routes are not walked, as included routers keep
    theirs to themselves."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._lane_routes: list[RequestOnlyRoute] = []

    def add_lanes(self, routes: Iterable[BaseRoute]) -> None:
        """Give a lane to each of these routes (included as they are, with their full
        paths) that is a `RequestOnlyRoute` of a fixed path; others are left alone."""
        self._lane_routes.extend(
            route
            for route in routes
            if isinstance(route, RequestOnlyRoute) and not route.param_convertors
        )

    def build_middleware_stack(self) -> ASGIApp:
        lanes = {
            (method, route.path): self._lane(route.endpoint)
            for route in self._lane_routes
            for method in route.methods or ()
        }
        return Lanes(super().build_middleware_stack(), lanes)

    def _lane(self, endpoint: Endpoint) -> ASGIApp:
        # The layers FastAPI puts around the router, with the endpoint in its place.
        error_handler = None
        handlers: dict[Any, Any] = {}
        for key, value in self.exception_handlers.items():
            if key in (500, Exception):
                error_handler = value
            else:
                handlers[key] = value
        app: ASGIApp = ExceptionMiddleware(_as_asgi(endpoint), handlers=handlers, debug=self.debug)
        for cls, args, kwargs in reversed(self.user_middleware):
            app = cls(app, *args, **kwargs)
        return ServerErrorMiddleware(app, handler=error_handler, debug=self.debug)
