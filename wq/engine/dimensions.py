"""Readiness dimensions: the uniform `needs_*` state machine.

A dimension is "true" (action needed) or "false" (handled); an absent one counts as
actionable; a "true" one with a future `pending_until` is deferred and counts as not
actionable until that time.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import inspect
from sqlalchemy.orm import Session
from sqlalchemy.orm.collections import collection_adapter

from wq.engine.models import WorkItem, WorkItemStatus, utcnow


def set_dimension(
    session: Session,
    item: WorkItem,
    dimension: str,
    needed: bool,
    *,
    variant: str = "",
    detail: Any = None,
    pending_until: datetime | None = None,
) -> WorkItemStatus:
    """Create or update one dimension of an item (detail replaced as given)."""
    values = {
        "status": "true" if needed else "false",
        "detail": detail,
        "pending_until": pending_until,
        "updated_at": utcnow(),
    }
    row = item.status(dimension, variant)
    if row is None and inspect(item).persistent:
        # Made as the loader makes rows (its values put in place: a row not yet
        # written has no change to track) and added to the loaded collection as if
        # read with it: the row is inserted as itself, so the flush need not work out
        # the item's collection changes (most of a cheap batch's flush).
        row = _new_row(item.id, dimension, variant, values)
        adapter = collection_adapter(item.statuses)
        assert adapter is not None  # a loaded instrumented collection
        adapter.append_without_event(row)
        session.add(row)
        return row
    if row is None:
        row = WorkItemStatus(dimension=dimension, variant=variant)
        item.statuses.append(row)  # a new item: its row is inserted first
    for key, value in values.items():
        setattr(row, key, value)
    if row not in session:  # (adding one already there walks its relationships again)
        session.add(row)
    return row


_ROWS = WorkItemStatus.__mapper__.class_manager


def _new_row(item_id: Any, dimension: str, variant: str, values: dict[str, Any]) -> WorkItemStatus:
    row: WorkItemStatus = _ROWS.new_instance()
    row.__dict__.update(values, work_item_id=item_id, dimension=dimension, variant=variant)
    return row


def is_actionable(item: WorkItem, dimension: str, now: datetime, variant: str = "") -> bool:
    """True when the dimension is absent, or "true" and not deferred."""
    row = item.status(dimension, variant)
    if row is None:
        return True
    return row.status != "false" and not row.is_deferred(now)


def first_actionable(item: WorkItem, dimensions: Iterable[str], now: datetime) -> str | None:
    """The first dimension, in the given priority order, that needs action."""
    for dimension in dimensions:
        if is_actionable(item, dimension, now):
            return dimension
    return None
