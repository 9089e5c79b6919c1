"""The audit of auth decisions; refusals answered as JSON; `X-Forwarded-*` ignored on /api/.

Every decision is one INFO line on the `wq.auth` logger, a JSON object with the
decision (`allow`/`deny`), the tier, the bare identity, the actor (the identity
qualified by its tier, see `Principal.actor`), the route template, the permission
and item type, never the token. Besides the line:

- an authentication failure (401, or 503 when a token cannot be checked) or an
  authorization denial (403, or 404 where a 403 would reveal that an item exists)
  is raised as a `Refusal`; its handler writes an audit row (`auth_failed` /
  `auth_denied`) in its own transaction, then answers `{"error": message}`. Anyone
  who reaches the port can fail to authenticate, so `auth_failed` rows are written at
  most `AUDITED_FAILURES_PER_MINUTE` a minute per daemon (`FailureBudget`); the next
  one written after a minute over the budget says how many were not (`unaudited`), and
  the metric counts every one;
- an allowed state-changing call adds an `auth_allowed` row to the request's own
  transaction, so that it commits with the change it allowed.

An audit row that cannot be written is logged and does not change the answer.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Receive, Scope, Send

from wq.daemon.auth.core import ACTOR_MAX, Principal
from wq.engine.audit import AuditRecord, audit

log = logging.getLogger(__name__)
decisions_log = logging.getLogger("wq.auth")

AUTH_FAILED = "auth_failed"
AUTH_DENIED = "auth_denied"
AUTH_ALLOWED = "auth_allowed"
ANONYMOUS = "anonymous"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# `auth_failed` rows written per minute at most (each daemon): beyond, refusals are
# counted and the next row written says how many were left out.
AUDITED_FAILURES_PER_MINUTE = 60


class FailureBudget:
    """How many `auth_failed` rows may be written now: `AUDITED_FAILURES_PER_MINUTE` a
    minute, counting those left out (thread-safe: refusals are audited on threads)."""

    def __init__(
        self,
        per_minute: int = AUDITED_FAILURES_PER_MINUTE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._per_minute = per_minute
        self._clock = clock
        self._lock = threading.Lock()
        self._minute_began = clock()
        self._written = 0
        self._left_out = 0

    def take(self) -> int | None:
        """None: over the budget, leave this one out; else write it, and the number
        returned is how many were left out since the last one written."""
        with self._lock:
            now = self._clock()
            if now - self._minute_began >= 60:
                self._minute_began, self._written = now, 0
            if self._written >= self._per_minute:
                self._left_out += 1
                return None
            self._written += 1
            left_out, self._left_out = self._left_out, 0
            return left_out


class Refusal(HTTPException):
    """An authentication failure or authorization denial, audited when answered.

    `details` go to the audit row's metadata and the decision line: the tier, the
    bare identity, the permission, the item type and id, as far as they are known.
    """

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


def webhook_refused(message: str, *, source: str = "gitlab") -> Refusal:
    """401 for a webhook delivery whose shared secret is missing or wrong."""
    return Refusal(
        401, message, event_type=AUTH_FAILED, actor=f"webhook:{source}", details={"tier": "webhook"}
    )


def denied(
    principal: Principal,
    permission: str,
    item_type: str | None,
    message: str,
    *,
    status: int = 403,
    item_id: uuid.UUID | None = None,
) -> Refusal:
    """A caller who lacks a permission: 403, or `status` (404 where 403 would tell too much)."""
    return Refusal(
        status,
        message,
        event_type=AUTH_DENIED,
        actor=principal.actor,
        details={
            **_who(principal),
            "permission": permission,
            "item_type": item_type,
            "item_id": None if item_id is None else str(item_id),
        },
    )


def _who(principal: Principal) -> dict[str, Any]:
    return {"tier": principal.tier, "identity": principal.identity[:ACTOR_MAX]}


# A request's path as the audit and the log keep it: anyone may send one of any length.
PATH_MAX = 600


def path_of(request: Request) -> str:
    """The request's path, cut to `PATH_MAX` characters (marked with `...`)."""
    path = request.url.path
    return path if len(path) <= PATH_MAX else path[:PATH_MAX] + "..."


def route_of(request: Request) -> str:
    """The route template the request matched (`/api/work-items/{item_id}`), else its path."""
    route = request.scope.get("route")
    template = getattr(route, "path", None)
    return template if isinstance(template, str) else path_of(request)


def count_decision(request: Request, tier: str | None, outcome: str) -> None:
    """Count one decision in the daemon's metrics (by tier and outcome)."""
    runtime = getattr(request.app.state, "runtime", None)
    metrics = getattr(runtime, "metrics", None)
    if metrics is not None:
        metrics.child(metrics.auth_decisions, tier or "none", outcome).inc()


def _outcome(refusal: Refusal) -> str:
    if refusal.event_type == AUTH_DENIED:
        return "denied"
    return "unavailable" if refusal.status_code == 503 else "failed"


def log_decision(request: Request, decision: str, actor: str, details: dict[str, Any]) -> None:
    """The DEBUG line of one auth decision (JSON, so that no value can forge a field).

    DEBUG, not INFO: a line per request is no news to an operator, and the decisions
    that matter (refusals, allowed changes) are audit entries, which are logged at INFO.
    An allow is counted here too; a refusal is counted where it is answered.
    """
    if decision == "allow":
        count_decision(request, details.get("tier"), "allowed")
    if decisions_log.isEnabledFor(logging.DEBUG):
        line = {
            "decision": decision,
            "actor": actor,
            "method": request.method,
            "route": route_of(request),
            **details,
        }
        decisions_log.debug(
            "auth %s", json.dumps({k: v for k, v in line.items() if v is not None}, sort_keys=True)
        )


def allowed(
    request: Request,
    principal: Principal,
    permission: str | None,
    item_type: str | None = None,
    *,
    session: Session | None = None,
    item_id: uuid.UUID | None = None,
) -> None:
    """Log an allow; for a state-changing call, audit it in the request's transaction."""
    log_decision(
        request, "allow", principal.actor, _allow_details(principal, permission, item_type, item_id)
    )
    if session is not None:
        audit_allowed(request, principal, permission, item_type, session=session, item_id=item_id)


def audit_allowed(
    request: Request,
    principal: Principal,
    permission: str | None,
    item_type: str | None = None,
    *,
    session: Session,
    item_id: uuid.UUID | None = None,
) -> None:
    """The audit row of an allowed state-changing call, in `session`'s transaction (so it
    commits with the change it allowed); nothing for a safe method (GET)."""
    record = allowed_record(request, principal, permission, item_type, item_id)
    if record is not None:
        audit(session, record)


def allowed_record(
    request: Request,
    principal: Principal,
    permission: str | None,
    item_type: str | None = None,
    item_id: uuid.UUID | None = None,
) -> AuditRecord | None:
    """The audit entry of an allowed state-changing call (None for a safe method), for
    a caller that writes it itself (`audit_allowed` otherwise)."""
    if request.method in SAFE_METHODS:
        return None
    details = _allow_details(principal, permission, item_type, item_id)
    return AuditRecord(
        AUTH_ALLOWED,
        principal.actor,
        item_id,
        trigger={"source": "api"},
        metadata={"method": request.method, "route": route_of(request), **details},
    )


def _allow_details(
    principal: Principal,
    permission: str | None,
    item_type: str | None,
    item_id: uuid.UUID | None,
) -> dict[str, Any]:
    return {
        **_who(principal),
        "permission": permission,
        "item_type": item_type,
        "item_id": None if item_id is None else str(item_id),
    }


def _record(request: Request, refusal: Refusal) -> None:
    details = {"status": refusal.status_code, **refusal.details}
    count_decision(request, refusal.details.get("tier"), _outcome(refusal))
    log_decision(request, "deny", refusal.actor, {**details, "reason": str(refusal.detail)})
    if refusal.event_type == AUTH_FAILED:
        left_out = request.app.state.auth_failures.take()
        if left_out is None:
            return
        if left_out:
            details["unaudited"] = left_out
    item_id = refusal.details.get("item_id")
    record = AuditRecord(
        refusal.event_type,
        refusal.actor[:ACTOR_MAX],
        None if item_id is None else uuid.UUID(item_id),
        trigger={"source": "api", "reason": str(refusal.detail)},
        metadata={
            "method": request.method,
            "path": path_of(request),
            "route": route_of(request),
            **details,
        },
    )
    runtime = request.app.state.runtime
    try:
        with runtime.sessions() as session:
            audit(session, record)
            session.commit()
    except Exception as err:
        log.warning("cannot audit a refused %s %s: %s", request.method, path_of(request), err)


async def answer_refusal(request: Request, refusal: Refusal) -> JSONResponse:
    """Audit a refusal (off the event loop) and answer it as `{"error": message}`."""
    await run_in_threadpool(_record, request, refusal)
    return JSONResponse(
        {"error": str(refusal.detail)}, status_code=refusal.status_code, headers=refusal.headers
    )


# Headers that carry a caller's credentials: sent twice, a proxy in front may judge one
# and the daemon the other.
CREDENTIAL_HEADERS = frozenset({b"authorization", b"x-gitlab-token"})


class ApiHeaders:
    """Drops `X-Forwarded-*` and `Forwarded` from requests to /api/ paths, and answers
    400 to one that carries a credential header twice.

    The OAuth proxy only fronts the login flow and `POST /oauth/token`; on /api/ such
    headers come from the caller and must never be trusted, so no handler sees them.
    Of two `Authorization` (or `X-Gitlab-Token`) headers the daemon read the first,
    and whatever stands in front of it may read the last.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and _is_api(scope.get("path", "")):
            headers = scope.get("headers", [])
            kept, credentials = [], []
            for name, value in headers:
                lower = name.lower()
                if lower.startswith(b"x-forwarded-") or lower == b"forwarded":
                    continue
                if lower in CREDENTIAL_HEADERS:
                    credentials.append(lower)
                kept.append((name, value))
            if len(credentials) != len(set(credentials)):
                twice = next(name for name in credentials if credentials.count(name) > 1)
                said = twice.decode("latin-1").title()
                answer = JSONResponse({"error": f"{said} is sent more than once"}, 400)
                await answer(scope, receive, send)
                return
            if len(kept) != len(headers):
                scope = {**scope, "headers": kept}
        await self.app(scope, receive, send)


def _is_api(path: str) -> bool:
    return path == "/api" or path.startswith("/api/")


def install_auth_handling(app: FastAPI) -> None:
    """Audit and answer refusals (authentication failures within a budget); ignore
    forwarded headers on /api/, and refuse a credential sent twice."""
    app.state.auth_failures = FailureBudget()
    app.add_exception_handler(Refusal, answer_refusal)  # type: ignore[arg-type]
    app.add_middleware(ApiHeaders)
