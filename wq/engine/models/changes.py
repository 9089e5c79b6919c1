"""What counts as a change of an item: its `updated_at` and its stamp, kept by the
ORM's flush (`before_flush` listeners on every session)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, event, inspect, update
from sqlalchemy.orm import InstanceState, Session
from sqlalchemy.orm.attributes import History
from sqlalchemy.orm.base import PassiveFlag
from sqlalchemy.orm.util import identity_key

from wq.engine.models.base import new_stamp, utcnow
from wq.engine.models.work_item import WorkItem, WorkItemStatus

# In `Session.info` of a session that runs executors (a worker's or a batch's): it
# holds the lease of the items it changes.
EXECUTOR_SESSION = "wq_in_executor"


# Who holds an item and when it is looked at next: no state of its own.
_SCHEDULING = frozenset(
    {"lease_owner", "lease_token", "leased_until", "run_after", "stamp", "updated_at"}
)


def history_of(state: InstanceState[Any], key: str) -> History:
    """What changed in attribute `key` since the load, as `state.attrs[key].history`
    tells it, without building `state.attrs` (a view of every attribute, dozens on a
    type's detail rows, made on each object's first look)."""
    return state.get_history(key, PassiveFlag.PASSIVE_NO_INITIALIZE)


def _changed_since_load(obj: object) -> Iterator[str]:
    """The attributes of `obj` whose value this flush changes. Only an attribute set
    since the load keeps its old value in `committed_state`, so only those are looked
    at (`Session.is_modified` looks at every one; a type's detail rows have dozens)."""
    state = inspect(obj)
    return (key for key in state.committed_state if history_of(state, key).has_changes())


def changes_state(item: WorkItem) -> bool:
    """True when a column beyond the lease and the schedule changed in this flush."""
    ignored = _SCHEDULING.union(item.scheduling_columns)
    columns = inspect(item).mapper.column_attrs
    return any(key in columns and key not in ignored for key in _changed_since_load(item))


@event.listens_for(Session, "before_flush")
def _touch_changes(session: Session, _context: Any, _instances: Any) -> None:
    """Stamp `updated_at` on every item whose state this flush changes (and no other)."""
    now: datetime | None = None
    for obj in session.dirty:
        if isinstance(obj, WorkItem) and changes_state(obj):
            now = now or utcnow()
            obj.updated_at = now


@event.listens_for(Session, "before_flush")
def _stamp_changes(session: Session, _context: Any, _instances: Any) -> None:
    """Give every work item a fresh stamp when this flush changes it or its dimensions.

    Every ORM write of an item's row, of its type's detail row (the same object) or of
    one of its `work_item_statuses` rows counts; a dimension written without its item
    loaded stamps the item with a statement of its own. Bulk statements that only
    move leases or admission (claims, heartbeats, admission passes) leave it alone:
    no decider reads those. So do the item's lease holder's own changes: only the
    holder compares stamps, it knows what it changed, and a batch that releases its
    items with one statement has no item row left to write.
    """
    if EXECUTOR_SESSION in session.info:
        return
    items: dict[int, WorkItem] = {}
    orphans: set[uuid.UUID] = set()

    def owner_of(row: WorkItemStatus) -> None:
        parent = row.__dict__.get("work_item")  # never a lazy load here
        if parent is None and row.work_item_id is not None:
            parent = session.identity_map.get(identity_key(WorkItem, row.work_item_id))
        if isinstance(parent, WorkItem):
            items[id(parent)] = parent
        elif row.work_item_id is not None:
            orphans.add(row.work_item_id)

    for obj in session.dirty:
        if isinstance(obj, WorkItem):
            if any(_changed_since_load(obj)):
                items[id(obj)] = obj
        elif isinstance(obj, WorkItemStatus) and any(_changed_since_load(obj)):
            owner_of(obj)
    for obj in (*session.new, *session.deleted):
        if isinstance(obj, WorkItemStatus):
            owner_of(obj)
    for item in items.values():
        if item not in session.deleted:
            item.stamp = new_stamp()
    if orphans:
        table = cast(Table, WorkItem.__table__)
        session.execute(update(table).where(table.c.id.in_(orphans)).values(stamp=new_stamp()))
