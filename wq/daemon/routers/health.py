"""Probes and metrics, without authentication.

`/healthz` says the process answers (a liveness probe: restarting the daemon would
not bring a database back); `/readyz` says it can serve the API (a readiness probe:
database reachable, schema not behind the revision this version needs); `/metrics` is
Prometheus' text format at exactly that path. Each also answers HEAD, as GET without
the body (uvicorn leaves it out): `curl -I` and the load balancers' checks that use it.
"""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BaseModel

from wq.daemon.contract import ANY_ROUTE, RETRY_AFTER_HEADER, error_responses
from wq.daemon.deps import RuntimeDep
from wq.daemon.outage import RETRY_AFTER_SECONDS, OutageLog
from wq.engine import schema
from wq.engine.outage import is_unavailable

router = APIRouter(tags=["health"])


class Liveness(BaseModel):
    """The process answers."""

    status: str


class Readiness(BaseModel):
    """Whether the daemon can serve the API, and why not."""

    status: str
    database: str
    schema_revision: str | None = None
    error: str | None = None


@router.get("/healthz", response_model=Liveness, responses=error_responses(*ANY_ROUTE))
async def read_health() -> Liveness:
    """Liveness: the process is up and serving HTTP (never looks at the database).

    On the event loop: under load, requests queue for the threadpool, and a probe
    queued behind them would have the kubelet restart a daemon that is only busy.
    """
    return Liveness(status="ok")


@router.get(
    "/readyz",
    response_model=Readiness,
    responses={
        **error_responses(*ANY_ROUTE),
        503: {
            "model": Readiness,
            "description": "database unreachable (with Retry-After) or its schema outdated",
            "headers": {"Retry-After": {**RETRY_AFTER_HEADER, "required": False}},
        },
    },
)
def read_readiness(runtime: RuntimeDep, request: Request) -> JSONResponse:
    """Readiness: the database answers and its schema is not behind (503 otherwise)."""
    outage: OutageLog = request.app.state.outage
    dialect = runtime.engine.dialect.name
    try:
        current = schema.current_revision(runtime.probe_engine or runtime.engine)
    except Exception as err:
        if not is_unavailable(err):
            raise
        outage.failed(err)
        body = Readiness(status="unavailable", database=dialect, error="database unreachable")
        return JSONResponse(
            body.model_dump(),
            status_code=503,
            headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
        )
    head = schema.cached_head_revision()
    # Behind only: after an upgrade's migrations, the old replicas stay in the Service
    # until the rollout replaces them.
    if schema.is_behind(current):
        body = Readiness(
            status="unavailable",
            database=dialect,
            schema_revision=current,
            error=f"schema at {current or 'nothing'}, needs {head}: run `{schema.FIX_COMMAND}`",
        )
        return JSONResponse(body.model_dump(), status_code=503)
    return JSONResponse(
        Readiness(status="ok", database=dialect, schema_revision=current).model_dump(
            exclude_none=True
        )
    )


@router.get(
    "/metrics",
    response_class=Response,
    responses={
        200: {"content": {"text/plain": {}}, "description": "Prometheus text format"},
        **error_responses(*ANY_ROUTE),
    },
)
def read_metrics(runtime: RuntimeDep) -> Response:
    """Prometheus metrics of this daemon, at exactly `/metrics` (no redirect).

    Database gauges are read here, at scrape time (cached; see `wq.engine.metrics_db`).
    """
    return Response(runtime.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)


# Not in the API document: the same operations, which the document names by their GET.
for _path, _endpoint in (
    ("/healthz", read_health),
    ("/readyz", read_readiness),
    ("/metrics", read_metrics),
):
    router.add_api_route(_path, _endpoint, methods=["HEAD"], include_in_schema=False)
