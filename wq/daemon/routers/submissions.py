"""`POST /api/work-items/{type}`: one submission endpoint per type that accepts them.

Types stay free of HTTP: each declares a payload schema and a handler; this module
turns them into routes with the `submit` permission on that type. The handler runs in
the thread pool; a submission that changes nothing may be answered on the event loop
instead (`wq.daemon.loop_submit`).
"""

# No `from __future__ import annotations` here: FastAPI reads the payload annotation,
# which is set per type at run time.

from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Response
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool

from wq.daemon.body import ParsedBodyRoute
from wq.daemon.contract import api_responses
from wq.daemon.deps import Permit, PrincipalDep, require
from wq.daemon.loop_reads import LoopReads
from wq.daemon.loop_submit import unchanged_on_loop
from wq.daemon.reads import dimensions
from wq.daemon.schemas import WorkItemPublic, WorkItemRef, answer, item_document
from wq.engine.models import utcnow
from wq.engine.registry import ItemType, SubmitContext

STATUS_BY_OUTCOME = {"created": 201}


class SubmissionPublic(BaseModel):
    """What a submission did, and the item it concerns (only its id and phase for a
    caller without `read` on its type: the item may be another caller's, found by its
    dedup key or its identity)."""

    action: str
    item: WorkItemPublic | WorkItemRef


def _shown_to(permit: Permit, type_name: str, document: dict[str, Any]) -> dict[str, Any]:
    """The item's document as the caller may see it."""
    if permit.principal.allows("read", type_name):
        return document
    return {"id": document["id"], "phase": document["phase"]}


def _endpoint(item_type: ItemType) -> Any:
    assert item_type.submission is not None
    submission = item_type.submission
    details_of = item_type.model.details_of

    async def create_item(
        payload: Any, permit: Annotated[Permit, Depends(require("submit", item_type.name))]
    ) -> Response:
        permit.check_project(submission.project_of(payload))
        reads: LoopReads | None = permit.request.app.state.loop_reads
        if reads is not None and submission.unchanged is not None:
            found = await unchanged_on_loop(reads, submission.unchanged, payload, permit.record())
            if found is not None:
                metrics = permit.runtime.metrics
                metrics.child(metrics.submissions, item_type.name, "unchanged").inc()
                shown = item_document(found.row, found.dimensions, details=details_of(found.row))
                shown = _shown_to(permit, item_type.name, shown)
                return answer(SubmissionPublic, {"action": "unchanged", "item": shown})
        return await run_in_threadpool(submit_in_thread, payload, permit)

    def submit_in_thread(payload: Any, permit: Permit) -> Response:
        runtime = permit.runtime
        project = submission.project_of(payload)
        context = SubmitContext(
            registry=runtime.registry,
            pool=runtime.config.pool_for(project),
            actor=permit.principal.actor,
            now=utcnow(),
        )
        session = runtime.sessions()
        try:
            permit.audit(session)
            result = submission.handle(session, payload, context)
            counted = runtime.metrics.child(
                runtime.metrics.submissions, item_type.name, result.outcome
            )
            if result.item_id is None:
                session.rollback()
                counted.inc()
                raise HTTPException(429, f"not enqueued: {result.outcome} for project {project}")
            if result.item is not None:
                shown = item_document(result.item)
            else:  # left as it was and not loaded: its dimensions as GET item reads them
                row = result.row
                shown = item_document(
                    row, dimensions(session, [row.id]).get(row.id, []), details=details_of(row)
                )
            # Serialised before the commit: an answer that cannot be written is a 5xx
            # that has stored nothing, so a client's retry cannot duplicate the work.
            document = {"action": result.outcome, "item": _shown_to(permit, item_type.name, shown)}
            response = answer(
                SubmissionPublic, document, STATUS_BY_OUTCOME.get(result.outcome, 200)
            )
            session.commit()
            counted.inc()
        finally:
            session.close()
        return response

    create_item.__annotations__["payload"] = submission.schema
    create_item.__doc__ = f"Submit a `{item_type.name}` work item (created, or the existing one)."
    return create_item


def only_post() -> None:
    """Any other method on a submission path (HEAD too, with GET): 405 naming POST."""
    raise HTTPException(405, "Method Not Allowed", headers={"Allow": "POST"})


def _unknown_type_endpoint(known: list[str]) -> Any:
    listed = ", ".join(sorted(known)) or "none"

    def reject_unknown_type(item_type: str, _: PrincipalDep) -> None:
        raise HTTPException(404, f"unknown work-item type {item_type!r}, known: {listed}")

    return reject_unknown_type


def build_router(types: list[ItemType]) -> APIRouter:
    """The submission routes of every type that has one.

    Included before the item routes: a request to `/api/work-items/mr` with another
    method then gets a 405 naming POST (the route of that path), not the item route's
    answer (its `{item_id}` would match "mr" by its path alone, and GET would be a 422
    for an id that is not a UUID).
    """
    router = APIRouter(prefix="/api/work-items", tags=["submissions"], route_class=ParsedBodyRoute)
    for item_type in types:
        if item_type.submission is not None:
            router.add_api_route(
                f"/{item_type.name}",
                _endpoint(item_type),
                methods=["POST"],
                response_model=SubmissionPublic,
                status_code=201,
                name=f"create_{item_type.name}_item",
                responses={
                    200: {
                        "model": SubmissionPublic,
                        "description": "an existing item (unchanged, updated, "
                        "retried or a dedup hit)",
                    },
                    # 400: a body FastAPI cannot decode (not UTF-8); 409: two
                    # submissions of the same item raced (submit again).
                    **api_responses(400, 409, 429, body=True),
                },
            )
            # After the POST route: a method neither names (OPTIONS) gets POST's 405.
            router.add_api_route(
                f"/{item_type.name}",
                only_post,
                methods=["GET", "PUT", "PATCH", "DELETE"],
                include_in_schema=False,
                name=f"only_post_{item_type.name}",
            )
    return router


def build_fallback_router(types: list[ItemType]) -> APIRouter:
    """POST to any other type: 404 naming the known ones. Included after the item routes."""
    router = APIRouter(prefix="/api/work-items")
    # Without it, POST to an unknown type would be a 405 from the item routes.
    router.add_api_route(
        "/{item_type}",
        _unknown_type_endpoint([t.name for t in types if t.submission is not None]),
        methods=["POST"],
        include_in_schema=False,
        name="reject_unknown_type",
    )
    return router
