"""`/healthz`: the daemon is up and its database answers."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse
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
