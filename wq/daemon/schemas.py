"""Response and request schemas of the generic API."""

from __future__ import annotations

import logging
import uuid
from datetime import datetime
from typing import Any, Literal, cast

import orjson
import pydantic_core
from fastapi import Response
from pydantic import BaseModel, ConfigDict, Field

from wq.engine.models import WorkItem

log = logging.getLogger(__name__)
# Items whose details could not be written back, logged once each per process.
_UNSHOWABLE_LOGGED: set[str] = set()

# The values the engine gives these columns (wq.engine.models), as the document states them.
Phase = Literal["active", "completed", "failed", "cancelled"]
Admission = Literal["queued", "admitted", "idle", "done"]
Lane = Literal["alert", "normal"]


class DimensionPublic(BaseModel):
    """One readiness dimension of an item."""

    dimension: str
    variant: str
    status: str
    detail: Any = None
    pending_until: datetime | None = None
    updated_at: datetime


class WorkItemPublic(BaseModel):
    """A work item as the API shows it, with nested type `details`."""

    id: uuid.UUID
    type: str
    project: str
    phase: Phase
    attempts: int
    error: str | None
    admission: Admission
    lane: Lane
    seq: int | None
    autonomous: bool
    dedup_key: str | None
    idempotency_key: str | None
    leased_until: datetime | None
    lease_owner: str | None
    run_after: datetime | None
    last_event_at: datetime | None
    queued_at: datetime | None
    admitted_at: datetime | None
    created_at: datetime
    updated_at: datetime = Field(
        description="when the item last changed state (not a lease or a scheduled check)"
    )
    details: dict[str, Any]
    dimensions: list[DimensionPublic]

    @classmethod
    def of(cls, item: WorkItem) -> WorkItemPublic:
        """Build from a loaded item."""
        return cls.model_validate(item_document(item))


def dimension_document(row: Any) -> dict[str, Any]:
    """A `WorkItemStatus` (or a row of its columns) as `DimensionPublic`'s fields."""
    return {
        "dimension": row.dimension,
        "variant": row.variant,
        "status": row.status,
        "detail": row.detail,
        "pending_until": row.pending_until,
        "updated_at": row.updated_at,
    }


class WorkItemRef(BaseModel):
    """What a caller without `read` on an item's type learns of it: its id and phase."""

    id: uuid.UUID
    phase: Phase

    @classmethod
    def of(cls, item: WorkItem) -> WorkItemRef:
        """Build from a loaded item."""
        return cls(id=item.id, phase=cast(Phase, item.phase))


def item_document(
    item: WorkItem | Any,
    dimensions: list[dict[str, Any]] | None = None,
    *,
    details: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A loaded item as `WorkItemPublic`'s fields, unvalidated (see `answer`).

    `dimensions` (from `dimension_document`), when given, stand for `item.statuses`,
    and `details` for `item.details_dict()`: then `item` may be a row of the
    `work_items` columns (`wq.daemon.reads`).
    """
    return {
        "id": item.id,
        "type": item.type,
        "project": item.project,
        "phase": item.phase,
        "attempts": item.attempts,
        "error": item.error,
        "admission": item.admission,
        "lane": item.lane,
        "seq": item.seq,
        "autonomous": item.autonomous,
        "dedup_key": item.dedup_key,
        "idempotency_key": item.idempotency_key,
        "leased_until": item.leased_until,
        "lease_owner": item.lease_owner,
        "run_after": item.run_after,
        "last_event_at": item.last_event_at,
        "queued_at": item.queued_at,
        "admitted_at": item.admitted_at,
        "created_at": item.created_at,
        "updated_at": item.updated_at,
        "details": item.details_dict() if details is None else details,
        "dimensions": (
            [dimension_document(row) for row in item.statuses] if dimensions is None else dimensions
        ),
    }


class WorkItemPage(BaseModel):
    """One page of items; pass `next_cursor` back as `cursor` for the next."""

    items: list[WorkItemPublic]
    next_cursor: str | None


class Health(BaseModel):
    """The daemon's health."""

    status: str
    database: str


class AuditEntryPublic(BaseModel):
    """One entry of an item's history: who changed what, when, from which state to which."""

    id: int
    at: datetime
    event_type: str
    actor: str
    old_state: Any = None
    new_state: Any = None
    trigger: Any = None
    metadata: Any = None


class HistoryPage(BaseModel):
    """One page of an item's history, newest first; pass `next_cursor` back as `cursor`."""

    entries: list[AuditEntryPublic]
    next_cursor: str | None


class PendingEventPublic(BaseModel):
    """An event stored for an item and not yet applied to it."""

    id: int
    event_type: str
    event_at: datetime | None
    created_at: datetime
    payload: Any = None

    model_config = ConfigDict(from_attributes=True)


class PendingEventPage(BaseModel):
    """One page of an item's pending events, oldest (next applied) first."""

    events: list[PendingEventPublic]
    next_cursor: str | None


# orjson writes what pydantic writes for the documents `answer` gets: UUIDs and datetimes
# (UTC as `Z`, microseconds only when not zero, naive ones without an offset) as strings,
# integer keys as strings, NaN and infinities as null.
_ANSWER_JSON = orjson.OPT_UTC_Z | orjson.OPT_NON_STR_KEYS


def answer(model: type[BaseModel], document: dict[str, Any], status_code: int = 200) -> Response:
    """`document` serialised as `model` serialises it, in the caller's thread.

    The JSON FastAPI would send for the route's `response_model`, without its costs: a
    sync endpoint's returned value is validated in another hop to the threadpool
    (FastAPI's `serialize_response`), and validating a page of items only to write it
    again cost a quarter of a list request. Documents are built by this package from
    the database's rows with the model's fields in its order, so orjson writes them as
    they are; what it does not write (integers beyond 64 bits, values of other types)
    goes through the model.
    """
    try:
        body = orjson.dumps(document, option=_ANSWER_JSON)
    except orjson.JSONEncodeError:
        try:
            body = model.model_validate(document).model_dump_json().encode()
        except (ValueError, RecursionError):
            # One stored row that cannot be written back (stored before the door checked
            # it, wq.daemon.documents) must not fail a list for every caller.
            body = model.model_validate(_showable(document)).model_dump_json().encode()
    return Response(content=body, status_code=status_code, media_type="application/json")


def _showable_item(item: Any) -> Any:
    """`item`, or it with its details replaced by a marker when they cannot be written."""
    if not isinstance(item, dict):
        return item
    try:
        pydantic_core.to_json(item)
    except (ValueError, RecursionError) as error:
        key = str(item.get("id"))
        if key not in _UNSHOWABLE_LOGGED:
            _UNSHOWABLE_LOGGED.add(key)
            log.error("work item %s: its stored details cannot be shown: %s", key, error)
        return {**item, "details": {"error": "the stored details cannot be shown"}}
    return item


def _showable(document: dict[str, Any]) -> dict[str, Any]:
    """`document` with each item that cannot be written replaced by a marked copy."""
    shown = dict(document)
    if isinstance(shown.get("items"), list):
        shown["items"] = [_showable_item(item) for item in shown["items"]]
    if "item" in shown:
        shown["item"] = _showable_item(shown["item"])
    if "details" in shown and "id" in shown:
        shown = _showable_item(shown)
    return shown
