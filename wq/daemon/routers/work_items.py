"""The generic work-item API: list, read, retry, cancel."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request, Response
from pydantic import BaseModel
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from wq.daemon.auth import Principal, authorize, authorize_item, authorize_lookup
from wq.daemon.body import ParsedBodyRoute
from wq.daemon.contract import api_responses
from wq.daemon.deps import (
    NO_NUL,
    PrincipalDep,
    ProjectName,
    ReadSessionDep,
    RuntimeDep,
    SessionDep,
    read_sessions,
)
from wq.daemon.loop_reads import LoopReads
from wq.daemon.reads import (
    LIST_FILTERS,
    dimensions_of_one,
    item_rows,
    item_statement,
    list_rows,
    list_statement,
    page_documents,
    page_documents_on_loop,
    search_values,
    shown_only,
)
from wq.daemon.schemas import (
    Admission,
    AuditEntryPublic,
    HistoryPage,
    PendingEventPage,
    PendingEventPublic,
    Phase,
    WorkItemPage,
    WorkItemPublic,
    WorkItemRef,
    answer,
)
from wq.engine import history as history_service
from wq.engine import items as item_service
from wq.engine import pending as pending_service
from wq.engine.models import WorkItem, utcnow

router = APIRouter(prefix="/api/work-items", tags=["work items"], route_class=ParsedBodyRoute)

# An audit entry's or event's id: the last of the previous page. 18 digits stay below
# 2**63, so every value of this form is a position the server takes.
ID_CURSOR = r"^[1-9][0-9]{0,17}$"


# A page ends at an item; the next page starts after it in (created_at, id) order. The
# cursor says where, readably: the item's creation time in microseconds since the
# epoch (UTC), a dash, its id as 32 hex digits. The pattern admits exactly what decodes
# (17 digits stay below year 9999), so the schema and the server agree on it.
ITEMS_CURSOR = r"^[0-9]{1,17}-[0-9a-f]{32}$"
ITEMS_CURSOR_TEXT = (
    "the `next_cursor` of the previous page: the last item's creation time in "
    "microseconds since 1970-01-01 UTC, `-`, its id as 32 lowercase hex digits"
)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

# Short ids: the TUI shows an id's first 8 hex digits, and people type those. At least
# 6, so that a prefix names few items; as a range of the primary key (the prefix padded
# with 0s, then with fs), which both databases read from its index.
ID_PREFIX = r"^[0-9a-fA-F]{6,32}$"
ID_PREFIX_TEXT = (
    "only items whose id starts with these hex digits (6 to 32, without dashes): "
    "resolves a short id"
)


def id_range(prefix: str) -> tuple[uuid.UUID, uuid.UUID]:
    """The lowest and the highest id that start with these hex digits."""
    return uuid.UUID(hex=prefix.ljust(32, "0")), uuid.UUID(hex=prefix.ljust(32, "f"))


def _encode_cursor(item: Any) -> str:
    created = item.created_at
    if created.tzinfo is None:  # SQLite hands back naive UTC
        created = created.replace(tzinfo=UTC)
    micros = (created - EPOCH) // timedelta(microseconds=1)
    return f"{micros}-{item.id.hex}"


def _decode_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    micros, _, hex_id = cursor.partition("-")
    return EPOCH + timedelta(microseconds=int(micros)), uuid.UUID(hex=hex_id)


def _id_cursor(cursor: str | None) -> int | None:
    """A numeric cursor (an audit or event id); its pattern was checked with the query."""
    return None if cursor is None else int(cursor)


@router.get("", response_model=WorkItemPage, responses=api_responses())
async def read_items(
    request: Request,
    principal: PrincipalDep,
    type: Annotated[str | None, Query(pattern=NO_NUL, description="only this type")] = None,
    phase: Phase | None = None,
    project: Annotated[ProjectName | None, Query()] = None,
    admission: Admission | None = None,
    id_prefix: Annotated[
        str | None, Query(max_length=32, pattern=ID_PREFIX, description=ID_PREFIX_TEXT)
    ] = None,
    search: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=200,
            pattern=NO_NUL,
            description=(
                "items whose project or error holds this text (any case) or whose id starts"
                " with it; walks the items newest first until the page is full"
            ),
        ),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Annotated[
        str | None, Query(max_length=50, pattern=ITEMS_CURSOR, description=ITEMS_CURSOR_TEXT)
    ] = None,
) -> Response:
    """List work items, newest first, with filters and cursor pagination."""
    authorize(request, principal, "read", type)
    values: dict[str, Any] = {"limit": limit + 1}
    for name, value in zip(LIST_FILTERS, (type, phase, project, admission), strict=True):
        if value is not None:
            values[name] = value
    if id_prefix is not None:
        values["id_low"], values["id_high"] = id_range(id_prefix)
    if search is not None:
        values.update(search_values(search))
    if cursor is not None:
        values["after_created"], values["after_id"] = _decode_cursor(cursor)
    readable = principal.types_with("read")
    if readable is not None:
        values["readable"] = sorted(readable)
    after = cursor is not None
    reads: LoopReads | None = request.app.state.loop_reads
    if reads is None:
        document = await run_in_threadpool(_page_in_thread, request, values, after, limit)
    else:
        statement = list_statement(values, after=after, postgres=True)
        rows = await reads.fetch_all(statement, values)
        page = rows[:limit]
        documents = await page_documents_on_loop(reads, read_sessions(request), page)
        document = _page(documents, rows, limit)
    return answer(WorkItemPage, document)


def _page_in_thread(
    request: Request, values: dict[str, Any], after: bool, limit: int
) -> dict[str, Any]:
    with read_sessions(request)() as session:
        rows = list_rows(session, values, after=after)
        return _page(page_documents(session, rows[:limit]), rows, limit)


def _page(documents: list[dict[str, Any]], rows: Sequence[Any], limit: int) -> dict[str, Any]:
    """A `WorkItemPage` of these documents; `rows` holds one more when there is more."""
    more = len(rows) > limit
    return {"items": documents, "next_cursor": _encode_cursor(rows[limit - 1]) if more else None}


# The paging parameters of an item's history and pending events.
PageLimit = Annotated[int, Query(ge=1, le=500)]
IdCursor = Annotated[
    str | None,
    Query(
        max_length=18,
        pattern=ID_CURSOR,
        description="the `next_cursor` of the previous page: the id of its last entry",
    ),
]


def _readable_item(
    request: Request, session: Session, principal: Principal, item_id: uuid.UUID
) -> WorkItem:
    """The item, if the caller may read its type; 404 alike for absent and unreadable."""
    authorize_lookup(principal, "read")
    # No dimensions: history and pending events do not show them.
    item = session.get(WorkItem, item_id, options=shown_only())
    if item is None:
        raise item_service.ItemNotFound(str(item_id))
    authorize_item(request, principal, "read", item.id, item.type)
    return item


@router.get("/{item_id}", response_model=WorkItemPublic, responses=api_responses(404))
async def read_item(request: Request, item_id: uuid.UUID, principal: PrincipalDep) -> Response:
    """One work item with its details and dimensions (404 for a type the caller may not read)."""
    authorize_lookup(principal, "read")
    # Read as the list reads a page (`wq.daemon.reads`): its row with its details.
    reads: LoopReads | None = request.app.state.loop_reads
    if reads is None:
        documents = await run_in_threadpool(_item_in_thread, request, item_id, principal)
    else:
        rows, shown = await reads.fetch_each(
            (item_statement(), {"id": item_id}), dimensions_of_one(item_id)
        )
        _authorize_read(request, principal, item_id, rows)
        documents = await page_documents_on_loop(reads, read_sessions(request), rows, shown)
    if not documents:  # deleted since its row was read
        raise item_service.ItemNotFound(str(item_id))
    return answer(WorkItemPublic, documents[0])


def _item_in_thread(
    request: Request, item_id: uuid.UUID, principal: Principal
) -> list[dict[str, Any]]:
    with read_sessions(request)() as session:
        rows = item_rows(session, item_id)
        _authorize_read(request, principal, item_id, rows)
        return page_documents(session, rows)


def _authorize_read(
    request: Request, principal: Principal, item_id: uuid.UUID, rows: Sequence[Any]
) -> None:
    """404 for no row; else the caller's `read` on the item's type."""
    if not rows:
        raise item_service.ItemNotFound(str(item_id))
    authorize_item(request, principal, "read", rows[0].id, rows[0].type)


@router.get("/{item_id}/history", response_model=HistoryPage, responses=api_responses(404))
def read_item_history(
    request: Request,
    item_id: uuid.UUID,
    session: ReadSessionDep,
    principal: PrincipalDep,
    limit: PageLimit = 50,
    cursor: IdCursor = None,
) -> HistoryPage:
    """An item's audit entries, newest first (404 for a type the caller may not read)."""
    before = _id_cursor(cursor)
    item = _readable_item(request, session, principal, item_id)
    page = history_service.item_history(session, item_id=item.id, limit=limit, before=before)
    return HistoryPage(
        entries=[
            AuditEntryPublic(
                id=entry.id,
                at=entry.at,
                event_type=entry.event_type,
                actor=entry.actor,
                old_state=entry.old_state,
                new_state=entry.new_state,
                trigger=entry.trigger,
                metadata=entry.extra,
            )
            for entry in page.entries
        ],
        next_cursor=str(page.next_before) if page.next_before is not None else None,
    )


@router.get(
    "/{item_id}/pending-events", response_model=PendingEventPage, responses=api_responses(404)
)
def read_item_pending_events(
    request: Request,
    item_id: uuid.UUID,
    session: ReadSessionDep,
    principal: PrincipalDep,
    limit: PageLimit = 50,
    cursor: IdCursor = None,
) -> PendingEventPage:
    """Events stored for an item and not applied yet, in the order they will be applied."""
    after = _id_cursor(cursor)
    item = _readable_item(request, session, principal, item_id)
    page = pending_service.pending_events(session, item_id=item.id, limit=limit, after=after)
    return PendingEventPage(
        events=[PendingEventPublic.model_validate(event) for event in page.events],
        next_cursor=str(page.next_after) if page.next_after is not None else None,
    )


@router.post(
    "/{item_id}/retry",
    response_model=WorkItemPublic | WorkItemRef,
    responses={
        200: {"description": "the item; only its id and phase without `read` on its type"},
        **api_responses(404, 409, body=True),
    },
)
def retry_item(
    request: Request,
    item_id: uuid.UUID,
    session: SessionDep,
    runtime: RuntimeDep,
    principal: PrincipalDep,
) -> WorkItemPublic | WorkItemRef:
    """Bring a failed or cancelled item back to active (attempts reset, audited)."""
    authorize_lookup(principal, "retry")
    item = session.get(WorkItem, item_id)
    if item is None:
        raise item_service.ItemNotFound(str(item_id))
    authorize_item(
        request, principal, "retry", item.id, item.type, project=item.project, session=session
    )
    item = item_service.retry(
        session, item_id, registry=runtime.registry, now=utcnow(), actor=principal.actor
    )
    session.commit()
    if not principal.allows("read", item.type):
        return WorkItemRef.of(item)
    return WorkItemPublic.of(item)


class CancelPublic(BaseModel):
    """What a cancel did: `cancelled` now, or `requested` (the run is being stopped)."""

    action: Literal["cancelled", "requested"]
    item: WorkItemPublic | WorkItemRef


@router.post(
    "/{item_id}/cancel",
    response_model=CancelPublic,
    responses={
        202: {"model": CancelPublic, "description": "the run is being stopped"},
        **api_responses(404, 409, body=True),
    },
)
def cancel_item(
    request: Request,
    item_id: uuid.UUID,
    response: Response,
    session: SessionDep,
    runtime: RuntimeDep,
    principal: PrincipalDep,
) -> CancelPublic:
    """Cancel an active item (202 while the work it runs is being stopped; `retry` permission)."""
    authorize_lookup(principal, "retry")
    item = session.get(WorkItem, item_id)
    if item is None:
        raise item_service.ItemNotFound(str(item_id))
    authorize_item(
        request, principal, "retry", item.id, item.type, project=item.project, session=session
    )
    action, item = item_service.cancel(
        session, item_id, registry=runtime.registry, now=utcnow(), actor=principal.actor
    )
    session.commit()
    response.status_code = 202 if action == "requested" else 200
    shown = WorkItemPublic.of(item) if principal.allows("read", item.type) else WorkItemRef.of(item)
    return CancelPublic.model_validate({"action": action, "item": shown})
