"""What a worker group's items' actions changed, written without the ORM's flush.

The items of a group (`wq.engine.finish_group`) come to be stored with their last
actions' changes on their loaded objects only: new or changed dimension rows, changed
columns of the item's row and of its type's detail row. Attaching each item to the
group's session for the unit of work to find those changes again was most of the
cost of storing a group; here they are read off the objects (what changed since the
load is what the ORM would write) and written by one executemany per table and set of
columns. An item whose changes are anything else (a dimension removed, a key column
changed, a default the ORM computes from its context) has no `ItemWrites`: the caller
leaves it to the ORM.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Column, Connection, Table, and_, bindparam, inspect
from sqlalchemy.orm import ColumnProperty, InstanceState, Mapper
from sqlalchemy.schema import ColumnDefault

from wq.engine.models import WorkItem, WorkItemStatus, changes_state, utcnow

STATUSES: Table = WorkItemStatus.__table__  # type: ignore[assignment]
WORK_ITEMS: Table = WorkItem.__table__  # type: ignore[assignment]

# (table, the columns written): the rows that go in one executemany.
_Shape = tuple[Table, tuple[str, ...]]
# Parameter prefixes of an update: a row's key, and the values set (a parameter may not
# be named after a column the statement sets).
_KEY = "key_"
_SET = "set_"


class NotPlain(Exception):
    """The item's changes are not plain column values: the ORM writes them."""


@dataclass
class GroupWrites:
    """The rows to insert and update for a group's items, by statement shape."""

    inserts: dict[_Shape, list[dict[str, Any]]] = field(default_factory=dict)
    updates: dict[_Shape, list[dict[str, Any]]] = field(default_factory=dict)

    def add(self, item: WorkItem) -> bool:
        """Take what `item`'s action changed; False (nothing taken) when the ORM must."""
        try:
            inserts, updates = _item_changes(item)
        except NotPlain:
            return False
        for table, values in inserts:
            self.inserts.setdefault((table, tuple(values)), []).append(values)
        for table, values, key in updates:
            self.updates.setdefault((table, tuple(values)), []).append(values | key)
        return True

    def write(self, connection: Connection) -> None:
        """Send the inserts, then the updates (the caller's transaction holds the fence)."""
        for (table, _), rows in self.inserts.items():
            connection.execute(table.insert(), rows)
        for (table, columns), rows in self.updates.items():
            keys = [column.key for column in table.primary_key.columns]
            statement = (
                table.update()
                .where(and_(*(table.c[key] == bindparam(f"{_KEY}{key}") for key in keys)))
                .values({name: bindparam(f"{_SET}{name}") for name in columns})
            )
            connection.execute(
                statement,
                [
                    {f"{_SET}{name}": row[name] for name in columns}
                    | {f"{_KEY}{key}": row[f"{_KEY}{key}"] for key in keys}
                    for row in rows
                ],
            )


_Rows = list[tuple[Table, dict[str, Any]]]
# (table, the columns set and their values, the row's key as parameters)
_Updates = list[tuple[Table, dict[str, Any], dict[str, Any]]]


def _item_changes(item: WorkItem) -> tuple[_Rows, _Updates]:
    """The rows to insert and to update for `item` (raises NotPlain)."""
    state: InstanceState[WorkItem] = inspect(item)
    mapper = state.mapper
    if state.deleted or state.was_deleted:
        raise NotPlain
    by_table: dict[Table, dict[str, Any]] = {}
    for key in state.committed_state:
        prop = mapper.attrs[key]
        history = state.attrs[key].history
        if key == "statuses":
            if history.deleted:
                raise NotPlain  # a dimension removed: the ORM deletes the orphan
            continue
        if not isinstance(prop, ColumnProperty):
            raise NotPlain  # another relationship set
        if not history.has_changes():
            continue
        value = history.added[0] if history.added else None
        for column in prop.columns:
            if not isinstance(column, Column) or column.primary_key:
                raise NotPlain
            by_table.setdefault(column.table, {})[column.key] = value
    if by_table and changes_state(item):
        # As the ORM's flush would (`models._touch_changes`): its state changed.
        by_table.setdefault(WORK_ITEMS, {}).setdefault("updated_at", utcnow())
    updates: _Updates = [
        (table, _with_onupdate(table, values), _key_of(mapper, table, item))
        for table, values in by_table.items()
    ]
    inserts: _Rows = []
    for row in item.__dict__.get("statuses") or ():
        row_state: InstanceState[WorkItemStatus] = inspect(row)
        if row_state.deleted or row_state.was_deleted:
            raise NotPlain
        if row_state.key is None:
            inserts.append((STATUSES, _new_status(row, item)))
        elif row_state.modified:
            changed = _changed_columns(row_state, STATUSES)
            if changed:
                row_key = _key_of(row_state.mapper, STATUSES, row)
                updates.append((STATUSES, _with_onupdate(STATUSES, changed), row_key))
    return inserts, updates


def _changed_columns(state: InstanceState[Any], table: Table) -> dict[str, Any]:
    """The columns of `table` changed on `state`'s object since its load."""
    changed: dict[str, Any] = {}
    for key in state.committed_state:
        prop = state.mapper.attrs[key]
        if not isinstance(prop, ColumnProperty):
            raise NotPlain
        history = state.attrs[key].history
        if not history.has_changes():
            continue
        for column in prop.columns:
            if column.primary_key or getattr(column, "table", None) is not table:
                raise NotPlain
            changed[column.key] = history.added[0] if history.added else None
    return changed


def _new_status(row: WorkItemStatus, item: WorkItem) -> dict[str, Any]:
    """The values of a dimension row to insert: as set, else the column's default."""
    # The item's id: a row appended with the ORM's events gets it only in a flush.
    values: dict[str, Any] = {"work_item_id": item.id}
    for column in STATUSES.columns:
        if column.key in values:
            continue
        if column.key in row.__dict__:
            values[column.key] = row.__dict__[column.key]
        elif column.default is not None:
            values[column.key] = _default_value(column.default)
        elif column.nullable:
            values[column.key] = None
        else:
            raise NotPlain
    return values


def _with_onupdate(table: Table, values: dict[str, Any]) -> dict[str, Any]:
    """`values` and the `onupdate` columns they do not set, as the ORM would write them."""
    for column in table.columns:
        if column.onupdate is not None and column.key not in values:
            if not isinstance(column.onupdate, ColumnDefault):
                raise NotPlain
            values[column.key] = _default_value(column.onupdate)
    return values


def _default_value(default: Any) -> Any:
    """A scalar or argument-free callable default's value (else NotPlain)."""
    if not isinstance(default, ColumnDefault):
        raise NotPlain
    if default.is_scalar:
        return default.arg
    if default.is_callable:
        function: Callable[[Any], Any] = default.arg  # wrapped: takes a context
        return function(None)
    raise NotPlain


def _key_of(mapper: Mapper[Any], table: Table, obj: object) -> dict[str, Any]:
    """The primary key of `obj`'s row in `table`, as parameters of an update."""
    return {
        f"{_KEY}{column.key}": getattr(obj, mapper.get_property_by_column(column).key)
        for column in table.primary_key.columns
    }
