"""A work item's output (a task's run), streamed as it is written: `GET .../logs`."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import StreamingResponse
from sqlalchemy import select
from starlette.concurrency import run_in_threadpool

from wq.daemon.auth import Principal, authorize_item, authorize_lookup
from wq.daemon.contract import api_responses
from wq.daemon.deps import PrincipalDep, read_sessions
from wq.daemon.runtime import Runtime
from wq.daemon.streams import SlotStream, TooManyStreams, relay
from wq.engine import items as item_service
from wq.engine.models import WorkItem
from wq.engine.registry import NoOutput

router = APIRouter(prefix="/api/work-items", tags=["work items"])

TEXT = "text/plain; charset=utf-8"


def _open(
    request: Request, principal: Principal, item_id: uuid.UUID, tail: int | None, follow: bool
) -> Iterator[str]:
    """The item's output reader, after the caller's `read` on its type is checked."""
    sessions = read_sessions(request)
    runtime: Runtime = request.app.state.runtime
    with sessions() as session:
        # Its type first: an item of a type this daemon's models do not know is no
        # object to load (replicas configured for other types share the database).
        item_type = session.scalar(select(WorkItem.type).where(WorkItem.id == item_id))
        if item_type is None:
            raise item_service.ItemNotFound(str(item_id))
        authorize_item(request, principal, "read", item_id, item_type)
        if item_type not in runtime.registry:
            raise NoOutput(f"this daemon does not handle {item_type} items: ask one that does")
        output = runtime.registry.get(item_type).output
        item = session.get(WorkItem, item_id)
        if output is None or item is None:
            raise NoOutput(f"{item_type} items have no output of their own (see their history)")
        return output(sessions, item, tail, follow)


@router.get(
    "/{item_id}/logs",
    response_class=StreamingResponse,
    responses={
        **api_responses(404, 409, 503),
        200: {"content": {TEXT: {"schema": {"type": "string"}}}, "description": "The output"},
    },
)
async def read_item_logs(
    request: Request,
    item_id: uuid.UUID,
    principal: PrincipalDep,
    follow: Annotated[
        bool, Query(description="keep the answer open and send what the run writes next")
    ] = False,
    tail: Annotated[
        int | None, Query(ge=0, le=1_000_000, description="only the last N lines at first")
    ] = None,
) -> StreamingResponse:
    """A task's output (stdout and stderr as written): what the run wrote so far, or its
    last `tail` lines; with `follow`, the answer stays open until the run ends. After
    the run ended, its whole log while the runner keeps it, else the tail the task kept.
    409 when there is none to show here (not started yet, or on another machine)."""
    authorize_lookup(principal, "read")
    runtime: Runtime = request.app.state.runtime
    slots = runtime.output_streams
    if slots.closing.is_set():
        raise HTTPException(503, "the daemon is stopping", {"Retry-After": "5"})
    try:
        # Taken here, before the answer starts: the last slots' requests at once each
        # get their 503 (a check here and a take in the stream let several through to
        # a 200 that only said the slots were taken).
        slot = slots.take()
    except TooManyStreams as err:
        raise HTTPException(503, f"{err}; try again shortly", {"Retry-After": "5"}) from None
    try:
        chunks = await run_in_threadpool(_open, request, principal, item_id, tail, follow)
    except NoOutput as err:
        slot.give_back()
        raise HTTPException(409, str(err)) from None
    except BaseException:
        slot.give_back()
        raise
    return SlotStream(
        relay(chunks, slot, request.is_disconnected, name=str(item_id)),
        slot,
        media_type=TEXT,
        headers={"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"},
    )
