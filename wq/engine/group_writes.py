"""What actions changed on their items' loaded objects, written without the ORM's flush.

The items of a worker's group (`wq.engine.finish_group`) come to be stored with their
last actions' changes on their loaded objects only: new or changed dimension rows,
changed columns of the item's row and of its type's detail row. Attaching each item to
the group's session for the unit of work to find those changes again was most of the
cost of storing a group; here they are read off the objects (what changed since the
load is what the ORM would write) and written by plain statements: the dimension rows
of the whole group, new and changed, by one statement taking them as one JSON document
(an executemany costs a round of the driver's Python per row), other columns likewise
by one statement per table and set of columns (`wq.engine.json_rows`). An item whose
changes are anything else (a dimension removed, a key column changed, a default the ORM
computes from its context, a value the ORM would refuse) is not taken: the caller
leaves it to the ORM. The scheduler writes what events changed on their items the same
way (`wq.engine.events`, with a fresh stamp); a batch of cheap actions
(`wq.engine.batch`) writes its items' dimension rows so (`write_dimensions`) and leaves
the rest to its flush.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Column, Connection, Table, inspect, text
from sqlalchemy.orm import ColumnProperty, InstanceState, Mapper, Session
from sqlalchemy.schema import ColumnDefault

from wq.engine import jsontext
from wq.engine.json_rows import UnfitValue, as_json, update_rows
from wq.engine.models import (
    WorkItem,
    WorkItemStatus,
    changes_state,
    history_of,
    new_stamp,
    utcnow,
)

STATUSES: Table = WorkItemStatus.__table__  # type: ignore[assignment]
WORK_ITEMS: Table = WorkItem.__table__  # type: ignore[assignment]

# The group's dimension rows, new (`new`) and changed, in one statement. `detail` comes
# as JSON text, written by the engine's own JSON serializer as the ORM's would be (None
# is JSON null there too).
_STATUS_COLUMNS = (
    "work_item_id",
    "dimension",
    "variant",
    "status",
    "detail",
    "pending_until",
    "updated_at",
)
if tuple(STATUSES.columns.keys()) != _STATUS_COLUMNS:  # pragma: no cover - a model change
    raise RuntimeError("work_item_statuses changed: update wq.engine.group_writes")
_WRITE_STATUSES = text(
    """
WITH given AS MATERIALIZED (
    SELECT * FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS given(new boolean,
        work_item_id uuid, dimension text, variant text, status text, detail text,
        pending_until timestamptz, updated_at timestamptz)
), inserted AS (
    INSERT INTO work_item_statuses (work_item_id, dimension, variant, status, detail,
        pending_until, updated_at)
    SELECT work_item_id, dimension, variant, status, CAST(detail AS jsonb), pending_until,
        updated_at
    FROM given WHERE new
    RETURNING 1
), updated AS (
    UPDATE work_item_statuses AS row
    SET status = given.status, detail = CAST(given.detail AS jsonb),
        pending_until = given.pending_until, updated_at = given.updated_at
    FROM given
    WHERE NOT given.new AND row.work_item_id = given.work_item_id
        AND row.dimension = given.dimension AND row.variant = given.variant
    RETURNING 1
)
SELECT (SELECT count(*) FROM inserted) AS inserted, (SELECT count(*) FROM updated) AS updated
"""
)

# (table, the columns written): the rows that go in one statement (`json_rows`).
_Shape = tuple[Table, tuple[str, ...]]
# The two parts of a row to update: its key, and the values set.
_KEY = "key"
_SET = "set"


class NotPlain(Exception):
    """The item's changes are not plain column values: the ORM writes them."""


@dataclass
class GroupWrites:
    """The rows to insert and update for a group's items, by statement shape."""

    statuses: list[dict[str, Any]] = field(default_factory=list)  # `_WRITE_STATUSES` rows
    updates: dict[_Shape, list[dict[str, Any]]] = field(default_factory=dict)

    def add(self, item: WorkItem, *, stamp: bool = False) -> bool:
        """Take what `item`'s action changed; False (nothing taken) when the ORM must.

        `stamp`: a change gives the item a fresh stamp, as the ORM's flush outside a
        lease holder's session does (`models.changes._stamp_changes`).
        """
        try:
            statuses, updates = _item_changes(item, stamp=stamp)
        except (NotPlain, UnfitValue):
            return False
        self.statuses.extend(statuses)
        for table, row in updates:
            self.updates.setdefault((table, tuple(row[_SET])), []).append(row)
        return True

    def write(self, connection: Connection) -> None:
        """Send the dimension rows, then the other columns (the caller's transaction holds
        the items' fences)."""
        if self.statuses:
            _write_statuses(connection, self.statuses)
        for (table, columns), rows in self.updates.items():
            update_rows(connection, table, columns, [row[_KEY] | row[_SET] for row in rows])


def write_dimensions(session: Session, items: Sequence[WorkItem]) -> None:
    """Write the new and changed dimension rows of `items`, attached to `session` with
    the rest of their changes, by one statement, and detach those rows so that the
    session's flush leaves them alone (a batch's items, `wq.engine.batch`). An item
    whose dimensions are not plain, or whose collection of them changed with the ORM's
    events (the flush would insert what it added), keeps them for the flush.
    """
    rows: list[dict[str, Any]] = []
    written: list[WorkItemStatus] = []
    for item in items:
        if "statuses" in inspect(item).committed_state:
            continue
        mine: list[WorkItemStatus] = []
        try:
            rows.extend(_status_rows(item, mine))
        except NotPlain:
            continue
        written.extend(mine)
    if not rows:
        return
    _write_statuses(session.connection(), rows)  # the connection: no autoflush before it
    for row in written:
        session.expunge(row)


# (table, the row: its key and the values set, by column, as JSON takes them)
_Updates = list[tuple[Table, dict[str, dict[str, Any]]]]


def _item_changes(item: WorkItem, *, stamp: bool) -> tuple[list[dict[str, Any]], _Updates]:
    """The dimension rows to write and the other rows to update for `item` (raises
    NotPlain); `stamp`: with a fresh stamp if anything changed."""
    state: InstanceState[WorkItem] = inspect(item)
    mapper = state.mapper
    if state.deleted or state.was_deleted:
        raise NotPlain
    by_table: dict[Table, dict[str, Any]] = {}
    for key in state.committed_state:
        prop = mapper.attrs[key]
        history = history_of(state, key)
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
        # As the ORM's flush would (`models.changes._touch_changes`): its state changed.
        by_table.setdefault(WORK_ITEMS, {}).setdefault("updated_at", utcnow())
    statuses = _status_rows(item)
    if stamp and (statuses or by_table):
        item.stamp = by_table.setdefault(WORK_ITEMS, {})["stamp"] = new_stamp()
    updates: _Updates = [
        (
            table,
            {
                _KEY: as_json(table, _key_of(mapper, table, item)),
                _SET: as_json(table, _with_onupdate(table, values)),
            },
        )
        for table, values in by_table.items()
    ]
    return statuses, updates


def _status_rows(
    item: WorkItem, written: list[WorkItemStatus] | None = None
) -> list[dict[str, Any]]:
    """The `_WRITE_STATUSES` rows of `item`'s new and changed dimensions (raises
    NotPlain); the objects they come from are appended to `written`."""
    statuses: list[dict[str, Any]] = []
    for row in item.__dict__.get("statuses") or ():
        row_state: InstanceState[WorkItemStatus] = inspect(row)
        if row_state.deleted or row_state.was_deleted:
            raise NotPlain
        if row_state.transient:
            # In no session: a row added in a savepoint rolled back since, or added
            # without the session (the flush writes neither).
            continue
        if row_state.key is None:
            statuses.append(_status_row(_new_status(row, item), new=True))
        elif row_state.modified:
            changed = _changed_columns(row_state, STATUSES)
            if not changed:
                continue
            values = _with_onupdate(STATUSES, changed)
            for name in _STATUS_COLUMNS:
                if name not in values:
                    if name not in row.__dict__:
                        raise NotPlain  # not loaded
                    values[name] = row.__dict__[name]
            statuses.append(_status_row(values, new=False))
        else:
            continue
        if written is not None:
            written.append(row)
    return statuses


def _write_statuses(connection: Connection, rows: list[dict[str, Any]]) -> None:
    written = connection.execute(_WRITE_STATUSES, {"rows": jsontext.dumps(rows)}).one()
    if written.inserted + written.updated != len(rows):
        raise RuntimeError("a changed dimension row was not found to update")


def _status_row(values: dict[str, Any], *, new: bool) -> dict[str, Any]:
    """A row of `_WRITE_STATUSES`, its values as JSON takes them (else NotPlain: the
    ORM takes them, and refuses what it refuses, such as a time without a zone)."""
    row: dict[str, Any] = {"new": new, "work_item_id": str(values["work_item_id"])}
    for column in ("dimension", "variant", "status"):
        if not isinstance(values[column], str):
            raise NotPlain
        row[column] = values[column]
    row["detail"] = jsontext.dumps(values["detail"])
    for column in ("pending_until", "updated_at"):
        moment = values[column]
        if moment is not None and not (isinstance(moment, datetime) and moment.tzinfo):
            raise NotPlain
        row[column] = None if moment is None else moment.isoformat()
    return row


def _changed_columns(state: InstanceState[Any], table: Table) -> dict[str, Any]:
    """The columns of `table` changed on `state`'s object since its load."""
    changed: dict[str, Any] = {}
    for key in state.committed_state:
        prop = state.mapper.attrs[key]
        if not isinstance(prop, ColumnProperty):
            raise NotPlain
        history = history_of(state, key)
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
    """The primary key of `obj`'s row in `table`, by column."""
    return {
        column.key: getattr(obj, mapper.get_property_by_column(column).key)
        for column in table.primary_key.columns
    }
