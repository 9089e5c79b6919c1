"""How the API reads items for its answers: a page as plain rows, an item's dimensions.

A page of the list is read without an ORM object per item, in two statements: the
page of `work_items` rows (the caller's filters, newest first) joined with each
type's `api_details_columns`, whose values the type's `details_of` turns into
`details` (the function a loaded item's `details_dict` calls, so a page shows each
item as GET item does); then the page's dimensions. Building 51 ORM objects and
their polymorphic `selectin` load was two thirds of a page's CPU, and a query of
details by 50 ids cost more than the join. A type that names no
`api_details_columns` (or keeps its columns in `work_items`) has its items on a
page loaded as objects, as before. GET item's statement, and the list's for each
combination of filters, are built once and run with bound values, on PostgreSQL
straight through the driver (`wq.engine.driver_reads`).
"""

from __future__ import annotations

import uuid
from collections import namedtuple
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Integer,
    Select,
    String,
    any_,
    bindparam,
    cast,
    func,
    inspect,
    literal_column,
    or_,
    select,
    tuple_,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.orm import Session, defer, lazyload, sessionmaker
from starlette.concurrency import run_in_threadpool

from wq.daemon.loop_reads import LoopReads
from wq.daemon.schemas import WorkItemPublic, dimension_document, item_document
from wq.engine.driver_reads import fetch_all
from wq.engine.models import FAILED, WorkItem, WorkItemStatus

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


STATUSES = WorkItemStatus.__table__
_DIMENSION_COLUMNS = (
    STATUSES.c.work_item_id,
    STATUSES.c.dimension,
    STATUSES.c.variant,
    STATUSES.c.status,
    STATUSES.c.detail,
    STATUSES.c.pending_until,
    STATUSES.c.updated_at,
)


def _one_of(column: ColumnElement[Any], name: str, *, postgres: bool) -> ColumnElement[bool]:
    """`column` equal to one of the list bound as `name`: `= ANY` of one array on
    PostgreSQL (read through the driver, which binds a list as an array), an
    expanding `IN` elsewhere."""
    if postgres:
        return column == any_(bindparam(name, type_=ARRAY(column.type)))
    return column.in_(bindparam(name, expanding=True))


def dimensions_statement(*, one: bool, postgres: bool) -> Select[Any]:
    """The dimensions of one item (bound `id`) or of several (bound `ids`), in the
    API's order: one query like the relationship's `selectin` load, without an ORM
    object per row (a page of 50 items has a few hundred)."""

    def build() -> Select[Any]:
        query = select(*_DIMENSION_COLUMNS)
        if one:
            query = query.where(STATUSES.c.work_item_id == bindparam("id"))
        else:
            query = query.where(_one_of(STATUSES.c.work_item_id, "ids", postgres=postgres))
        return query.order_by(STATUSES.c.dimension, STATUSES.c.variant)

    return _built(("dimensions", one, postgres), build, layout=False)


def _dimensions_of(ids: list[uuid.UUID], *, postgres: bool) -> tuple[Select[Any], dict[str, Any]]:
    if len(ids) == 1:
        return dimensions_statement(one=True, postgres=postgres), {"id": ids[0]}
    return dimensions_statement(one=False, postgres=postgres), {"ids": ids}


def dimensions_of_one(item_id: uuid.UUID) -> tuple[Select[Any], dict[str, Any]]:
    """The statement of one item's dimensions (on PostgreSQL) and its parameters."""
    return _dimensions_of([item_id], postgres=True)


def _by_item(found: Sequence[Any]) -> dict[uuid.UUID, list[dict[str, Any]]]:
    by_item: dict[uuid.UUID, list[dict[str, Any]]] = {}
    for row in found:
        by_item.setdefault(row.work_item_id, []).append(dimension_document(row))
    return by_item


def dimensions(session: Session, ids: list[uuid.UUID]) -> dict[uuid.UUID, list[dict[str, Any]]]:
    """The dimensions of these items as documents, by item (`dimensions_statement`)."""
    if not ids:
        return {}
    statement, params = _dimensions_of(ids, postgres=_on_postgres(session))
    return _by_item(fetch_all(session, statement, params))


# The list's order, newest first; `page_select` keeps it.
NEWEST_FIRST = (ITEMS.c.created_at.desc(), ITEMS.c.id.desc())


@dataclass(frozen=True)
class _Joined:
    """A type whose details come with the page: where its columns sit in a row."""

    kind: type[WorkItem]
    start: int
    columns: Any  # a namedtuple class of its `api_details_columns`


@dataclass(frozen=True)
class _Layout:
    key: tuple[str, ...]
    tables: tuple[tuple[Any, list[Any]], ...]  # each joined table and its columns
    joined: dict[str, _Joined]


_layout: _Layout | None = None


def _current_layout() -> _Layout:
    """The types joined to a page; made again when another type has been mapped."""
    global _layout
    mappers = inspect(WorkItem).polymorphic_map
    key = tuple(mappers)
    if _layout is not None and _layout.key == key:
        return _layout
    tables: list[tuple[Any, list[Any]]] = []
    joined: dict[str, _Joined] = {}
    start = len(ITEM_COLUMNS)
    for name, mapper in mappers.items():
        kind = mapper.class_
        table = mapper.local_table
        if not kind.api_details_columns or table is ITEMS:
            continue
        columns = [table.c[column] for column in kind.api_details_columns]
        tables.append((table, columns))
        row_class = namedtuple(f"{kind.__name__}Details", kind.api_details_columns)  # type: ignore[misc]
        joined[name] = _Joined(kind, start, row_class)
        start += len(columns)
    _layout = _Layout(key, tuple(tables), joined)
    return _layout


def page_select(page: Select[Any]) -> Select[Any]:
    """A page of `select(*ITEM_COLUMNS)` (filtered, ordered `NEWEST_FIRST`, limited)
    with the details columns of the types that name them, for `page_documents`."""
    inner = page.subquery("page")
    joins: Any = inner
    columns: list[Any] = []
    for table, shown in _current_layout().tables:
        joins = joins.outerjoin(table, table.c.id == inner.c.id)
        columns += shown
    # Joined after the limit, so only the page's rows are joined, and ordered again.
    return (
        select(*inner.c, *columns)
        .select_from(joins)
        .order_by(inner.c.created_at.desc(), inner.c.id.desc())
    )


# The list's filters: each an equality on the `work_items` column of its name.
LIST_FILTERS = ("type", "phase", "project", "admission")

_statements: dict[tuple[Any, ...], Select[Any]] = {}


def _on_postgres(session: Session) -> bool:
    return session.get_bind().dialect.name == "postgresql"


def _built(
    key: tuple[Any, ...], build: Callable[[], Select[Any]], *, layout: bool = True
) -> Select[Any]:
    """A statement built once per shape (and layout, for a page): building one (its
    page subquery, its cache key) cost more CPU than running it. Values are bound at
    execution."""
    if layout:
        key = (_current_layout().key, *key)
    statement = _statements.get(key)
    if statement is None:
        statement = _statements[key] = build()
    return statement


def item_statement() -> Select[Any]:
    """`page_select` of one item, by the bound `id`."""
    return _built(
        ("item",), lambda: page_select(select(*ITEM_COLUMNS).where(ITEMS.c.id == bindparam("id")))
    )


def list_statement(values: dict[str, Any], *, after: bool, postgres: bool) -> Select[Any]:
    """`page_select` of a page of the list, newest first, for these bound values.

    `values` binds each filter of `LIST_FILTERS` it names (by that name), `limit`,
    and, if given, `readable` (the types the caller may read) and `id_low` with
    `id_high` (ids in that range: a short id's); with `after`, `after_created` and
    `after_id` (the page starts after that item).
    """
    filters = frozenset(values) & frozenset(LIST_FILTERS)
    # Failed items have an index of their own (`ix_work_items_failed_newest`): the phase
    # is written in the statement too, so that every plan of it may use that index.
    failed = values.get("phase") == FAILED
    restricted = "readable" in values
    id_range = "id_low" in values
    searching = "search" in values

    def build() -> Select[Any]:
        rows: Any = ITEMS
        if id_range:
            rows = _id_range_rows()
        query = select(*(rows.c[column.name] for column in ITEM_COLUMNS))
        for name in LIST_FILTERS:
            if name in filters:
                query = query.where(rows.c[name] == bindparam(name))
        if failed:
            query = query.where(rows.c.phase == literal_column(f"'{FAILED}'"))
        if after:
            # A row comparison: one range of ix_work_items_newest.
            position = tuple_(
                bindparam("after_created", type_=ITEMS.c.created_at.type),
                bindparam("after_id", type_=ITEMS.c.id.type),
            )
            query = query.where(tuple_(rows.c.created_at, rows.c.id) < position)
        if searching:
            query = query.where(_search(rows, postgres=postgres))
        if restricted:  # in SQL, so that pages stay full and cursors exact
            query = query.where(_one_of(rows.c.type, "readable", postgres=postgres))
        limit = bindparam("limit", type_=Integer)
        newest_first = (rows.c.created_at.desc(), rows.c.id.desc())
        return page_select(query.order_by(*newest_first).limit(limit))

    key = ("list", tuple(sorted(filters)), failed, after, restricted, id_range, searching, postgres)
    return _built(key, build)


def search_values(text: str) -> dict[str, str]:
    """The bound values of a `search` for `text`: LIKE patterns, lower case, escaped."""
    escaped = text.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return {"search": f"%{escaped}%", "search_id": f"{escaped}%"}


def _search(rows: Any, *, postgres: bool) -> Any:
    """Items whose project or error holds the bound `search` text (any case), or whose
    id starts with it. It walks the list's order until a page is full: narrow it with
    the other filters on a large history."""
    text = bindparam("search", type_=String)
    # PostgreSQL writes a uuid with dashes, SQLite keeps 32 hex digits: the id is
    # compared as each shows it (the TUI shows its first 8 digits, the same in both).
    item_id = func.lower(cast(rows.c.id, String))
    return or_(
        func.lower(rows.c.project).like(text, escape="\\"),
        func.lower(rows.c.error).like(text, escape="\\"),
        item_id.like(bindparam("search_id", type_=String), escape="\\"),
    )


def _id_range_rows() -> Any:
    """The items whose id lies between the bound `id_low` and `id_high` (a short id's),
    read first as one range of the primary key. Materialized: as a plain condition, a
    generic plan (which does not know how narrow the range is) walked
    ix_work_items_newest backwards through every item, filtering on the id."""
    low = bindparam("id_low", type_=ITEMS.c.id.type)
    high = bindparam("id_high", type_=ITEMS.c.id.type)
    ranged = select(*ITEM_COLUMNS).where(ITEMS.c.id >= low, ITEMS.c.id <= high)
    return ranged.cte("id_range").prefix_with("MATERIALIZED")


def item_rows(session: Session, item_id: uuid.UUID) -> Sequence[Any]:
    """The `page_select` row of one item (none if there is no such item)."""
    return fetch_all(session, item_statement(), {"id": item_id})


def list_rows(session: Session, values: dict[str, Any], *, after: bool) -> Sequence[Any]:
    """A page of the list (`list_statement`)."""
    statement = list_statement(values, after=after, postgres=_on_postgres(session))
    return fetch_all(session, statement, values)


def _joined_details(rows: Sequence[Any]) -> tuple[dict[uuid.UUID, Any], list[uuid.UUID]]:
    """The `details` the rows carry, by id, and the ids of the items whose type names
    no `api_details_columns` (their details are loaded)."""
    joined = _current_layout().joined
    details: dict[uuid.UUID, dict[str, Any]] = {}
    loaded: list[uuid.UUID] = []
    for row in rows:
        found = joined.get(row.type)
        if found is None:
            loaded.append(row.id)
            continue
        end = found.start + len(found.columns._fields)
        details[row.id] = found.kind.details_of(found.columns._make(row[found.start : end]))
    return details, loaded


def _documents(
    rows: Sequence[Any],
    details: dict[uuid.UUID, Any],
    shown: dict[uuid.UUID, list[dict[str, Any]]],
) -> list[dict[str, Any]]:
    return [
        item_document(row, shown.get(row.id, []), details=details[row.id])
        for row in rows
        if row.id in details
    ]


def page_documents(session: Session, rows: Sequence[Any]) -> list[dict[str, Any]]:
    """The documents (`WorkItemPublic`'s fields) of the rows of a `page_select`.

    In the rows' order. An item whose details are loaded separately (its type names
    no `api_details_columns`) and that was deleted after its row was read (reads on
    PostgreSQL take a snapshot per statement) is left out.
    """
    details, loaded = _joined_details(rows)
    if loaded:
        details.update(_loaded_details(session, loaded))
    return _documents(rows, details, dimensions(session, [row.id for row in rows]))


async def page_documents_on_loop(
    reads: LoopReads,
    sessions: sessionmaker[Session],
    rows: Sequence[Any],
    dimension_rows: Sequence[Any] | None = None,
) -> list[dict[str, Any]]:
    """`page_documents` with the dimensions awaited on the event loop (`reads`), unless
    they were read already (`dimension_rows`); the details of items loaded as objects
    are loaded in the thread pool (`sessions`)."""
    details, loaded = _joined_details(rows)
    if loaded:
        details.update(await run_in_threadpool(_load_details, sessions, loaded))
    if dimension_rows is None and rows:
        statement, params = _dimensions_of([row.id for row in rows], postgres=True)
        dimension_rows = await reads.fetch_all(statement, params)
    return _documents(rows, details, _by_item(dimension_rows or []))


def _load_details(sessions: sessionmaker[Session], ids: list[uuid.UUID]) -> dict[uuid.UUID, Any]:
    with sessions() as session:
        return _loaded_details(session, ids)


def _loaded_details(session: Session, ids: list[uuid.UUID]) -> dict[uuid.UUID, Any]:
    """The `details` of these items from their loaded objects (an unknown type fails
    as the ORM fails on it), by id."""
    loaded = session.execute(
        select(WorkItem).options(*shown_only()).where(WorkItem.id.in_(ids))
    ).scalars()
    return {item.id: item.details_dict() for item in loaded}
