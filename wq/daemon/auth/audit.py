"""Refused requests: audited, then answered as JSON errors; `X-Forwarded-*` ignored on /api/.

Every authentication failure (401, or 503 when a token cannot be checked) and every
authorization denial (403) is raised as a `Refusal`; its handler writes an audit
row (`auth_failed` / `auth_denied`: the actor, the reason, the method and path,
never the token) in its own transaction and answers `{"error": message}`. An audit
that cannot be written is logged and does not change the answer.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Receive, Scope, Send

from wq.engine.audit import AuditRecord, audit

log = logging.getLogger(__name__)

AUTH_FAILED = "auth_failed"
AUTH_DENIED = "auth_denied"
ANONYMOUS = "anonymous"
ACTOR_MAX = 255


class Refusal(HTTPException):
    """An authentication failure or authorization denial, audited when answered."""

    def __init__(
        self,
        status_code: int,
        message: str,
        *,
        event_type: str,
        actor: str = ANONYMOUS,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(status_code, message, headers=headers)
        self.event_type = event_type
        self.actor = actor
        self.details = details or {}


def unauthenticated(message: str, *, unavailable: bool = False) -> Refusal:
    """401 with a Bearer challenge, or 503 when the token could not be checked."""
    if unavailable:
        return Refusal(503, message, event_type=AUTH_FAILED, headers={"Retry-After": "5"})
    return Refusal(401, message, event_type=AUTH_FAILED, headers={"WWW-Authenticate": "Bearer"})


def denied(
    identity: str, tier: str, permission: str, item_type: str | None, message: str
) -> Refusal:
    """403 for a caller who lacks a permission."""
    return Refusal(
        403,
        message,
        event_type=AUTH_DENIED,
        actor=identity,
        details={"tier": tier, "permission": permission, "item_type": item_type},
    )


def _record(request: Request, refusal: Refusal) -> None:
    runtime = request.app.state.runtime
    record = AuditRecord(
        refusal.event_type,
        refusal.actor[:ACTOR_MAX],
        trigger={"source": "api", "reason": str(refusal.detail)},
        metadata={
            "method": request.method,
            "path": request.url.path,
            "status": refusal.status_code,
            **refusal.details,
        },
    )
    try:
        with runtime.sessions() as session:
            audit(session, record)
            session.commit()
    except Exception as err:
        log.warning("cannot audit a refused %s %s: %s", request.method, request.url.path, err)


class IgnoreForwardedHeaders:
    """Drops `X-Forwarded-*` and `Forwarded` from requests to /api/ paths.

    The OAuth proxy only fronts the login flow and `POST /oauth/token`; on /api/ such
    headers come from the caller and must never be trusted, so no handler sees them.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and _is_api(scope.get("path", "")):
            headers = scope.get("headers", [])
            kept = [
                (name, value)
                for name, value in headers
                if not name.lower().startswith(b"x-forwarded-") and name.lower() != b"forwarded"
            ]
            if len(kept) != len(headers):
                scope = {**scope, "headers": kept}
        await self.app(scope, receive, send)


def _is_api(path: str) -> bool:
    return path == "/api" or path.startswith("/api/")


def install_auth_handling(app: FastAPI) -> None:
    """Audit and answer refusals; ignore forwarded headers on /api/."""

    @app.exception_handler(Refusal)
    async def refused(request: Request, exc: Refusal) -> JSONResponse:
        await run_in_threadpool(_record, request, exc)
        return JSONResponse(
            {"error": str(exc.detail)}, status_code=exc.status_code, headers=exc.headers
        )

    app.add_middleware(IgnoreForwardedHeaders)
