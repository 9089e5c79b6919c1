"""`/healthz`, `/metrics`: probes and Prometheus, without authentication."""

from __future__ import annotations

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text

from wq.daemon.deps import RuntimeDep

router = APIRouter(tags=["health"])


@router.get("/healthz")
def read_health(runtime: RuntimeDep) -> JSONResponse:
    """Health of the daemon and its database (503 when the database is unreachable)."""
    try:
        with runtime.read_sessions() as session:
            session.execute(text("SELECT 1"))
    except Exception as err:
        return JSONResponse(
            {"status": "unhealthy", "database": "unreachable", "error": type(err).__name__},
            status_code=503,
        )
    return JSONResponse({"status": "ok", "database": runtime.engine.dialect.name})


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {"text/plain": {}}, "description": "Prometheus text format"}},
)
def read_metrics() -> Response:
    """Prometheus metrics of this daemon, at exactly `/metrics` (no redirect)."""
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)
