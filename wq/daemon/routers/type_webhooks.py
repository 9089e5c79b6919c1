"""`POST /api/webhooks/{name}`: intake endpoints that work-item types bring.

The caller is authenticated before the body is read: a wq Bearer token with
`submit` on the type, or the webhook's shared secret as the Bearer value (compared
in constant time). The type's handler gets the parsed JSON and decides the answer.
"""

from __future__ import annotations

import hmac
import json
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

from wq.daemon.deps import RuntimeDep, forbid_unless, get_principal
from wq.daemon.runtime import Runtime
from wq.engine.models import utcnow
from wq.engine.registry import BadWebhookPayload, ItemType, Webhook, WebhookContext

_bearer = HTTPBearer(auto_error=False, description="A wq token or the webhook's secret")
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]


def _caller(runtime: Runtime, hook: Webhook, type_name: str, credentials: Any) -> str:
    secret = hook.shared_secret
    if (
        secret
        and credentials is not None
        and credentials.scheme.lower() == "bearer"
        and hmac.compare_digest(credentials.credentials.encode(), secret.encode())
    ):
        return f"{hook.name}-webhook"
    principal = get_principal(runtime, credentials)
    forbid_unless(principal, "submit", type_name)
    return principal.identity


def _run(runtime: Runtime, hook: Webhook, document: Any, actor: str) -> tuple[int, dict[str, Any]]:
    context = WebhookContext(
        registry=runtime.registry, pool_for=runtime.config.pool_for, actor=actor, now=utcnow()
    )
    with runtime.sessions() as session:
        status, body = hook.handle(session, document, context)
        session.commit()
    return status, body


def _endpoint(item_type: ItemType, hook: Webhook) -> Any:
    async def receive(request: Request, runtime: RuntimeDep, credentials: Credentials) -> Any:
        actor = _caller(runtime, hook, item_type.name, credentials)
        try:
            document = json.loads(await request.body())
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise HTTPException(400, "the body is not JSON") from None
        try:
            status, body = await run_in_threadpool(_run, runtime, hook, document, actor)
        except BadWebhookPayload as err:
            raise HTTPException(400, str(err)) from None
        return JSONResponse(body, status_code=status)

    receive.__doc__ = f"Intake of `{item_type.name}` items from the {hook.name} webhook."
    return receive


def build_router(types: list[ItemType]) -> APIRouter:
    """The webhook routes of every type that brings some."""
    router = APIRouter(prefix="/api/webhooks", tags=["events"])
    for item_type in types:
        for hook in item_type.webhooks:
            router.add_api_route(
                f"/{hook.name}",
                _endpoint(item_type, hook),
                methods=["POST"],
                name=f"receive_{hook.name}_webhook",
            )
    return router
