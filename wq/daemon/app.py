"""The FastAPI application of `wq daemon`."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI

import wq
from wq.daemon.auth import install_auth_handling
from wq.daemon.body import BodyGuard
from wq.daemon.errors import install_error_handlers
from wq.daemon.http_metrics import HttpMetrics
from wq.daemon.lanes import LanedApp
from wq.daemon.loop_reads import loop_reads
from wq.daemon.outage import OutageLog, note_checkouts
from wq.daemon.routers import (
    bulk,
    health,
    identity,
    logs,
    pools,
    replicas,
    stats,
    submissions,
    type_webhooks,
    webhooks,
    work_items,
)
from wq.daemon.runtime import Runtime
from wq.daemon.shedding import LoadShedding, backlog
from wq.daemon.warm import warm_up


@contextlib.asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    """The app's own resources: the hot reads' async connections (`wq.daemon.loop_reads`),
    and what the first requests would set up, done before them (`wq.daemon.warm`)."""
    runtime: Runtime = app.state.runtime
    size = runtime.config.server.request_threads
    async with loop_reads(runtime.engine, runtime.timeouts, size=size) as reads:
        app.state.loop_reads = reads
        await warm_up(app.router, runtime.engine, size, app.openapi)
        try:
            yield
        finally:
            app.state.loop_reads = None


def create_app(runtime: Runtime) -> FastAPI:
    """Build the API around a runtime (the engine threads are started elsewhere)."""
    app = LanedApp(
        title="wq",
        version=wq.__version__,
        description="The wq work-queue engine: work items, admission pools, processing.",
    )
    app.state.runtime = runtime
    app.state.loop_reads = None  # until the lifespan opens them
    app.router.lifespan_context = _lifespan
    app.state.outage = OutageLog()
    install_error_handlers(app, app.state.outage)
    for engine in (runtime.engine, runtime.probe_engine):
        if engine is not None:
            note_checkouts(engine)
    types = [runtime.registry.get(name) for name in runtime.registry.names]
    # Runs before any route reads a body (inside the auth layer's header filter).
    server = runtime.config.server
    app.add_middleware(
        BodyGuard,
        max_body_bytes=server.max_body_bytes,
        max_document_depth=server.max_document_depth,
        max_document_bytes=server.max_document_bytes,
        body_timeout_seconds=server.body_timeout_seconds,
        bodies_per_caller=server.bodies_per_caller,
        self_bounded={
            f"/api/work-items/{item_type.name}": item_type.submission.self_bounded
            for item_type in types
            if item_type.submission is not None
        },
    )
    install_auth_handling(app)
    # Order matters: a type's own submission route and the bulk actions before the
    # item routes (whose `{item_id}` would take their paths), the unknown-type fallback
    # after them. The webhooks come first: they take the most requests, and no other
    # path starts with theirs (routes are tried in order, per request).
    routers = [
        webhooks.router,
        type_webhooks.build_router(types),
        health.router,
        identity.router,
        submissions.build_router(types),
        bulk.router,
        work_items.router,
        logs.router,
        submissions.build_fallback_router(types),
        pools.router,
        stats.router,
        replicas.router,
    ]
    for router in routers:
        app.include_router(router)
    # Before any other layer spends CPU on a request it would answer too late.
    app.add_middleware(
        LoadShedding,
        threads=server.request_threads,
        max_waiting=server.max_waiting_requests,
        backlog=backlog(),
        shed=runtime.metrics.http_shed,
    )
    # Outermost: every answer is counted, refusals of the layers above included. The
    # routers' own routes carry the full templates the route label is taken from.
    routes = [*app.routes, *(route for router in routers for route in router.routes)]
    app.add_middleware(HttpMetrics, metrics=runtime.metrics, routes=routes)
    app.add_lanes(routes)  # the webhook's: served through the same layers, past the router
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            type_webhooks.document_bodies(generate(), types)  # amends the cached document
        return app.openapi_schema or generate()

    app.openapi = openapi  # type: ignore[method-assign]
    return app
