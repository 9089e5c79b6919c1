"""How the API reads items for its answers: a page as plain rows, an item's dimensions.

A page of the list is read without an ORM object per item: its `work_items` columns
in one query, each type's `details` from a query of that type's `api_details_columns`
handed to the type's `details_of` (the function a loaded item's `details_dict` calls,
so a page shows each item as GET item does), and the page's dimensions in one more.
Building 51 ORM objects and their polymorphic `selectin` load was two thirds of a
page's CPU. A type that names no `api_details_columns` has its items on the page
loaded as objects, as before.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Row, inspect, select
from sqlalchemy.orm import Mapper, Session, defer, lazyload

from wq.daemon.schemas import WorkItemPublic, dimension_document, item_document
from wq.engine.models import WorkItem, WorkItemStatus

ITEMS = WorkItem.__table__
# The `work_items` columns an item's document shows: its fields but the nested ones.
ITEM_COLUMNS = tuple(
    ITEMS.c[name] for name in WorkItemPublic.model_fields if name not in ("details", "dimensions")
)


def shown_only() -> list[Any]:
    """Loader options: no dimensions (see `dimensions`), no columns of any type's
    `api_unshown` (reading one raises rather than costing a query per item)."""
    options: list[Any] = [lazyload(WorkItem.statuses)]
    for mapper in inspect(WorkItem).polymorphic_map.values():
        for name in mapper.class_.api_unshown:
            options.append(defer(getattr(mapper.class_, name), raiseload=True))
    return options


def dimensions(session: Session, ids: list[uuid.UUID]) -> dict[uuid.UUID, list[dict[str, Any]]]:
    """The dimensions of these items, in the API's order, as plain rows.

    One query like the relationship's `selectin` load, without an ORM object per
    row (a page of 50 items has a few hundred).
    """
    if not ids:
        return {}
    found = session.execute(
        select(
            WorkItemStatus.work_item_id,
            WorkItemStatus.dimension,
            WorkItemStatus.variant,
            WorkItemStatus.status,
            WorkItemStatus.detail,
            WorkItemStatus.pending_until,
            WorkItemStatus.updated_at,
        )
        .where(WorkItemStatus.work_item_id.in_(ids))
        .order_by(WorkItemStatus.dimension, WorkItemStatus.variant)
    )
    by_item: dict[uuid.UUID, list[dict[str, Any]]] = {}
    for row in found:
        by_item.setdefault(row.work_item_id, []).append(dimension_document(row))
    return by_item


def page_documents(session: Session, rows: Sequence[Row[Any]]) -> list[dict[str, Any]]:
    """The documents (`WorkItemPublic`'s fields) of items read as rows of `ITEM_COLUMNS`.

    In the rows' order. An item deleted after its row was read (reads on PostgreSQL
    take a snapshot per statement) is left out.
    """
    by_type: dict[str, list[uuid.UUID]] = {}
    for row in rows:
        by_type.setdefault(row.type, []).append(row.id)
    details: dict[uuid.UUID, dict[str, Any]] = {}
    for name, ids in by_type.items():
        details.update(_details(session, name, ids))
    shown = dimensions(session, [row.id for row in rows])
    return [
        item_document(row, shown.get(row.id, []), details=details[row.id])
        for row in rows
        if row.id in details
    ]


def _details(session: Session, type_name: str, ids: list[uuid.UUID]) -> dict[uuid.UUID, Any]:
    """The `details` of these items of one type, by id."""
    mapper: Mapper[Any] | None = inspect(WorkItem).polymorphic_map.get(type_name)
    kind = WorkItem if mapper is None else mapper.class_
    if mapper is None or not kind.api_details_columns:
        # Loaded as objects (an unknown type fails as the ORM fails on it).
        loaded = session.execute(
            select(WorkItem).options(*shown_only()).where(WorkItem.id.in_(ids))
        ).scalars()
        return {item.id: item.details_dict() for item in loaded}
    table = mapper.local_table
    columns = [table.c[name] for name in kind.api_details_columns]
    found = session.execute(select(table.c.id, *columns).where(table.c.id.in_(ids)))
    return {row.id: kind.details_of(row) for row in found}
