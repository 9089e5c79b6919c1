"""`POST /api/webhooks/gitlab`: GitLab events without AWS in between.

GitLab's `X-Gitlab-Token` must equal the configured secret (constant-time compare);
the event then takes the same path as one from the queue: resolve, store, wake. A body
that is not strict JSON, nests too deeply or holds NUL characters is a 400: GitLab
shows the reason, and nothing is stored.

The route takes the most requests of any, so it is served without FastAPI's request
handling (`RequestOnlyRoute`): the endpoint reads the runtime and the header off the
request itself. Solving its parameters, validating its answer against the model and
the handler's wrapping cost about a sixth of a webhook request's CPU. It also has a
lane of its own past the router (`wq.daemon.lanes`). The document describes it as
before (`openapi_extra`, `response_model`).
"""

from __future__ import annotations

import hmac
from datetime import timedelta
from typing import Any

from fastapi import APIRouter, HTTPException, Request, Response
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from wq.daemon.auth import log_decision, webhook_refused
from wq.daemon.body import webhook_document
from wq.daemon.contract import ANY_ROUTE, error_responses
from wq.daemon.lanes import RequestOnlyRoute
from wq.daemon.loop_events import ingest_on_loop
from wq.daemon.loop_reads import LoopReads
from wq.daemon.routers.type_webhooks import NO_NUL, request_body
from wq.daemon.runtime import Runtime
from wq.daemon.schemas import answer
from wq.engine.envelope import (
    UndecodableMessage,
    event_from_payload,
)
from wq.engine.events import event_queries, ingest
from wq.engine.models import utcnow

router = APIRouter(prefix="/api/webhooks", tags=["events"], route_class=RequestOnlyRoute)
# What `event_from_payload` needs: the kind in `object_kind`, or in `event_type` when
# `object_kind` is absent or false as Python reads it (null, false, 0, "", [], {}).
_KIND = {"type": "string", "minLength": 1, "maxLength": 128, "pattern": NO_NUL}
GITLAB_EVENT: dict[str, Any] = {
    "type": "object",
    "anyOf": [
        {"required": ["object_kind"], "properties": {"object_kind": _KIND}},
        {
            "required": ["event_type"],
            "properties": {
                "object_kind": {"enum": [None, False, 0, "", [], {}]},
                "event_type": _KIND,
            },
        },
    ],
}

# The secret header, as a `Header()` parameter would be documented.
TOKEN_HEADER = {
    "name": "x-gitlab-token",
    "in": "header",
    "required": False,
    "schema": {"anyOf": [{"type": "string"}, {"type": "null"}], "title": "X-Gitlab-Token"},
}


class GitlabEventPublic(BaseModel):
    """What became of an event: its type, and for how many items it was stored."""

    event: str
    stored: int = Field(ge=0)


@router.post(
    "/gitlab",
    status_code=202,
    response_model=GitlabEventPublic,
    # The secret header, not a Bearer token: no 403, and any media type (GitLab's own).
    responses=error_responses(*ANY_ROUTE, 400, 401, 404, 408, 413, 422, 503),
    openapi_extra={
        **request_body("a GitLab webhook event, as GitLab sends it", GITLAB_EVENT),
        "parameters": [TOKEN_HEADER],
    },
)
async def receive_gitlab_event(request: Request) -> Response:
    """Store a GitLab webhook event for the items it concerns (202)."""
    runtime: Runtime = request.app.state.runtime
    x_gitlab_token = request.headers.get("x-gitlab-token")
    secret = runtime.webhook_secret
    if secret is None:
        raise HTTPException(404, "the GitLab webhook is not enabled on this daemon")
    if x_gitlab_token is None or not hmac.compare_digest(x_gitlab_token.encode(), secret.encode()):
        raise webhook_refused("missing or wrong X-Gitlab-Token")  # audited
    log_decision(request, "allow", "webhook:gitlab", {"tier": "webhook"})
    runtime.webhook_received_at = utcnow()
    document = await webhook_document(await request.body())
    try:
        event = event_from_payload(document)
    except UndecodableMessage as err:
        raise HTTPException(400, f"not a GitLab event: {err}") from None
    skew = timedelta(seconds=runtime.config.events.max_future_skew_seconds)
    reads: LoopReads | None = request.app.state.loop_reads
    queries = event_queries(runtime.registry, event.event_type)
    if reads is not None and queries is not None:  # PostgreSQL, lookups only
        stored = await ingest_on_loop(
            reads,
            queries,
            event,
            wakeup=runtime.wakeup,
            metrics=runtime.metrics,
            source="webhook",
            max_future_skew=skew,
        )
    else:
        stored = await run_in_threadpool(
            ingest,
            runtime.sessions,
            runtime.registry,
            event,
            source="webhook",
            max_future_skew=skew,
        )
    return answer(GitlabEventPublic, {"event": event.event_type, "stored": stored}, 202)
