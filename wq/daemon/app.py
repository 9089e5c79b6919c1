"""The FastAPI application of `wq daemon`."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

import wq
from wq.daemon.auth import install_auth_handling
from wq.daemon.body import BodyGuard
from wq.daemon.errors import install_error_handlers
from wq.daemon.outage import OutageLog
from wq.daemon.routers import (
    health,
    identity,
    pools,
    submissions,
    type_webhooks,
    webhooks,
    work_items,
)
from wq.daemon.runtime import Runtime


def create_app(runtime: Runtime) -> FastAPI:
    """Build the API around a runtime (the engine threads are started elsewhere)."""
    app = FastAPI(
        title="wq",
        version=wq.__version__,
        description="The wq work-queue engine: work items, admission pools, processing.",
    )
    app.state.runtime = runtime
    app.state.outage = OutageLog()
    install_error_handlers(app, app.state.outage)
    # Runs before any route reads a body (inside the auth layer's header filter).
    app.add_middleware(BodyGuard, max_body_bytes=runtime.config.server.max_body_bytes)
    install_auth_handling(app)
    types = [runtime.registry.get(name) for name in runtime.registry.names]
    app.include_router(health.router)
    app.include_router(identity.router)
    app.include_router(submissions.build_router(types))
    app.include_router(work_items.router)
    app.include_router(submissions.build_fallback_router(types))
    app.include_router(pools.router)
    app.include_router(webhooks.router)
    app.include_router(type_webhooks.build_router(types))
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            type_webhooks.document_bodies(generate(), types)  # amends the cached document
        return app.openapi_schema or generate()

    app.openapi = openapi  # type: ignore[method-assign]
    return app
