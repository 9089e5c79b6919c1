"""`POST /api/webhooks/{name}`: intake endpoints that work-item types bring.

The caller is authenticated before the body is read: a wq Bearer token with
`submit` on the type, or the webhook's shared secret as the Bearer value (compared
in constant time). The type's handler gets the parsed JSON and decides the answer.
"""

from __future__ import annotations

import hmac
from functools import partial
from typing import Any

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from wq.daemon.auth.audit import count_decision
from wq.daemon.auth.guard import authenticate_request, authorize
from wq.daemon.body import webhook_document
from wq.daemon.contract import API_ROUTE, error_responses
from wq.daemon.deps import RuntimeDep
from wq.daemon.documents import DocumentRefused, check_field
from wq.daemon.runtime import Runtime
from wq.engine.models import utcnow
from wq.engine.registry import BadWebhookPayload, ItemType, Webhook, WebhookContext

_ANSWER = {"application/json": {"schema": {"type": "object", "additionalProperties": True}}}
# The type's handler chooses the answer; the daemon adds the shared refusals. Any media
# type is taken (senders such as Grafana do not always say JSON): no 415.
WEBHOOK_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"description": "taken without a new item (the handler says why)", "content": _ANSWER},
    201: {"description": "a new item was created", "content": _ANSWER},
    **error_responses(*API_ROUTE, 400, 408, 413, 422),
}
REF_TEMPLATE = "#/components/schemas/{model}"
NO_NUL = r"^[^\x00]*$"
# Every webhook refuses a body with NUL in any key or string (400): the document says
# so with this schema beside the sender's own (`allOf`).
WITHOUT_NUL = "JsonWithoutNul"
JSON_WITHOUT_NUL: dict[str, Any] = {
    "description": "any JSON whose strings and keys hold no NUL (\\u0000)",
    "anyOf": [
        {"type": "string", "pattern": NO_NUL},
        {"type": "number"},
        {"type": "boolean"},
        {"type": "null"},
        {"type": "array", "items": {"$ref": REF_TEMPLATE.format(model=WITHOUT_NUL)}},
        {
            "type": "object",
            "propertyNames": {"pattern": NO_NUL},
            "additionalProperties": {"$ref": REF_TEMPLATE.format(model=WITHOUT_NUL)},
        },
    ],
}


def request_body(description: str, schema: dict[str, Any]) -> dict[str, Any]:
    """The `openapi_extra` of a webhook route: `schema`, and no NUL anywhere."""
    without_nul = {"$ref": REF_TEMPLATE.format(model=WITHOUT_NUL)}
    return {
        "requestBody": {
            "required": True,
            "description": description,
            "content": {"application/json": {"schema": {"allOf": [schema, without_nul]}}},
        }
    }


WEBHOOK_REQUEST = request_body("the sender's JSON document", {"type": "object"})


async def _caller(request: Request, hook: Webhook, type_name: str) -> str:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    secret = hook.shared_secret
    if (
        secret
        and scheme.lower() == "bearer"
        and hmac.compare_digest(token.strip().encode(), secret.encode())
    ):
        count_decision(request, "webhook", "allowed")
        return f"webhook:{hook.name}"
    # A token's check may call out (OIDC keys, OpenShift) and its refusal is audited:
    # off the event loop, as `get_principal` does, so a slow one stalls no other request.
    return await run_in_threadpool(_authorized_actor, request, type_name)


def _authorized_actor(request: Request, type_name: str) -> str:
    principal = authenticate_request(request)
    authorize(request, principal, "submit", type_name)
    return principal.actor


def _run(runtime: Runtime, hook: Webhook, document: Any, actor: str) -> tuple[int, dict[str, Any]]:
    server = runtime.config.server
    context = WebhookContext(
        registry=runtime.registry,
        pool_for=runtime.config.pool_for,
        actor=actor,
        now=utcnow(),
        check_document=partial(
            check_field,
            max_depth=server.max_document_depth,
            max_bytes=server.max_document_bytes,
        ),
    )
    with runtime.sessions() as session:
        status, body = hook.handle(session, document, context)
        session.commit()
    return status, body


def _endpoint(item_type: ItemType, hook: Webhook) -> Any:
    async def receive(request: Request, runtime: RuntimeDep) -> Any:
        actor = await _caller(request, hook, item_type.name)
        document = await webhook_document(await request.body())
        try:
            status, body = await run_in_threadpool(_run, runtime, hook, document, actor)
        except BadWebhookPayload as err:
            raise HTTPException(400, str(err)) from None
        except DocumentRefused as err:
            raise HTTPException(422, str(err)) from None
        return JSONResponse(body, status_code=status)

    receive.__doc__ = f"Intake of `{item_type.name}` items from the {hook.name} webhook."
    return receive


def document_bodies(document: dict[str, Any], types: list[ItemType]) -> None:
    """Put the body schema of each webhook that declares one into an OpenAPI document.

    The route reads its body itself (after authentication), so FastAPI cannot see the
    model; its schema and those it refers to join the document's components here, with
    `JsonWithoutNul` that every webhook body (the GitLab one too) refers to.
    """
    components = document.setdefault("components", {}).setdefault("schemas", {})
    components[WITHOUT_NUL] = JSON_WITHOUT_NUL
    for item_type in types:
        for hook in item_type.webhooks:
            if hook.schema is None:
                continue
            schema = hook.schema.model_json_schema(ref_template=REF_TEMPLATE)
            components.update(schema.pop("$defs", {}))
            components[hook.schema.__name__] = schema
            operation = document["paths"][f"/api/webhooks/{hook.name}"]["post"]
            content = operation["requestBody"]["content"]["application/json"]
            content["schema"]["allOf"][0] = {
                "$ref": REF_TEMPLATE.format(model=hook.schema.__name__)
            }


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
                responses=WEBHOOK_RESPONSES,
                openapi_extra=WEBHOOK_REQUEST,
            )
    return router
