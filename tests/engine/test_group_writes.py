"""What grouped actions changed is stored as the ORM's flush would store it.

A worker's group of items is stored in one transaction (`wq.engine.finish_group`), and
a batch of cheap actions is (`wq.engine.batch`); on PostgreSQL their changes are read
off the items' objects and written by plain statements (`wq.engine.group_writes`: a
batch's dimension rows only), else, and for changes that are not plain column values,
by the ORM. Whichever way, the rows must come out the same: new and changed
dimensions, the item's columns and its type's detail columns.
"""

from __future__ import annotations

import logging
import threading
import uuid
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from tests.conftest import Store, make_config
from tests.engine.helpers import audit_types, claimed, load
from wq.engine import items
from wq.engine.admission import dispatch
from wq.engine.batch import BatchRunner
from wq.engine.dimensions import first_actionable, set_dimension
from wq.engine.group_writes import GroupWrites
from wq.engine.models import WorkItem, WorkItemStatus, utcnow
from wq.engine.registry import ActionContext, ItemType, TypeRegistry
from wq.engine.runner import ItemRunner
from wq.types.task.models import TaskItem

CHECK_AT = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
# A time given in another zone than UTC: the same moment must come back.
WAKE_AT = datetime(2031, 6, 7, 8, 9, 10, 123456, tzinfo=timezone(timedelta(hours=2)))


def work(ctx: ActionContext) -> None:
    """What the item's payload asks for, then `needs_work` handled."""
    item = ctx.item
    assert isinstance(item, TaskItem)
    does = item.payload["does"]
    if does == "change":  # an existing dimension changed
        set_dimension(
            ctx.session, item, "needs_other", True, detail={"seen": 2}, pending_until=WAKE_AT
        )
    elif does == "columns":  # a column of work_items, of task_details, a schedule
        item.error = "noted"
        item.log_tail = "last lines"
        item.next_check_at = CHECK_AT
    elif does == "typed":  # JSON, integer, boolean and time columns of task_details
        item.payload = {**item.payload, "seen": [1, "two", None, {"n": 1.5}]}
        item.exit_status = 3
        item.cancel_requested = True
        item.started_at = WAKE_AT
    elif does == "append":  # a row appended with the ORM's events, not set_dimension
        item.statuses.append(WorkItemStatus(dimension="needs_extra", variant="v", status="true"))
    elif does == "remove":  # a dimension dropped: the ORM deletes the orphan
        item.statuses.remove(item.status("needs_other"))
    elif does == "elsewhere":  # a row of another item, added without a statement
        ctx.session.add(
            WorkItemStatus(
                work_item_id=uuid.UUID(item.payload["other"]), dimension="needs_note", status="true"
            )
        )
    set_dimension(ctx.session, item, "needs_work", False, detail={"by": does})


def registry(cheap: bool = False) -> TypeRegistry:
    """The `task` model with the test's action: run on workers, or cheap (in batches)."""
    reg = TypeRegistry()
    reg.register_type(
        ItemType(
            name="task",
            model=TaskItem,
            decider=lambda item, now: (
                "work" if first_actionable(item, ["needs_work"], now) else None
            ),
            executors={"work": work},
            cheap_actions=frozenset({"work"}) if cheap else frozenset(),
        )
    )
    return reg


def submitted(store: Store, reg: TypeRegistry, does: str, **payload: str) -> uuid.UUID:
    config = make_config(store.url)
    with store.sessions.begin() as session:
        item = TaskItem(
            project=f"gw/{does}",
            lane="normal",
            autonomous=False,
            kind="k",
            payload={"does": does, **payload},
            runner="command",
        )
        intake = items.submit(
            session,
            item,
            registry=reg,
            pool=config.pool_for(item.project),
            now=utcnow(),
            actor="test",
            trigger={"source": "test"},
        )
        assert intake.item is not None
        set_dimension(session, intake.item, "needs_other", True, detail={"seen": 1})
        return intake.item.id


def run_as_a_group(store: Store, reg: TypeRegistry, count: int) -> set[uuid.UUID]:
    """Claim `count` items, run each on one worker's group, store the group; the ids of
    the items the group took (the others were stored alone)."""
    config = make_config(store.url)
    dispatch(store.sessions, config, clock=utcnow)
    claims = claimed(store.sessions, reg, count, "task")
    runner = ItemRunner(store.sessions, reg, config.processing, utcnow, threading.Event())
    group = runner.new_group()
    grouped = {
        claim.id
        for claim in claims
        if runner.run(claim.id, claim.token, "me/worker-0", item=claim.item, group=group)
    }
    runner.finish(group)
    return grouped


def run_as_a_batch(store: Store, reg: TypeRegistry, count: int) -> None:
    """Run the `count` items' cheap actions in one batch."""
    config = make_config(store.url)
    dispatch(store.sessions, config, clock=utcnow)
    taken = BatchRunner(store.sessions, reg, config.processing, utcnow).take("me", limit=count)
    assert (taken.taken, taken.handoff) == (count, [])


def dimensions(item: WorkItem) -> dict[tuple[str, str], tuple[str, Any]]:
    return {(row.dimension, row.variant): (row.status, row.detail) for row in item.statuses}


@pytest.mark.parametrize("path", ["group", "batch"])
def test_grouped_items_changes_are_stored_whatever_they_are(
    store: Store, path: str, caplog: pytest.LogCaptureFixture
) -> None:
    reg = registry(cheap=path == "batch")
    ids = {
        does: submitted(store, reg, does)
        for does in ("new", "change", "columns", "typed", "append", "remove")
    }
    ids["elsewhere"] = submitted(store, reg, "elsewhere", other=str(ids["new"]))
    before = {does: load(store.sessions, item_id) for does, item_id in ids.items()}
    if path == "batch":
        run_as_a_batch(store, reg, len(ids))
        # In one try: not stored again an action at a time after a failed commit.
        assert [r.message for r in caplog.records if r.levelno >= logging.WARNING] == []
    else:
        grouped = run_as_a_group(store, reg, len(ids))
        # A dimension removed, a row of another item: those two are stored alone.
        assert grouped == {
            item_id for does, item_id in ids.items() if does not in ("remove", "elsewhere")
        }

    stored = {does: load(store.sessions, item_id) for does, item_id in ids.items()}
    for does, item in stored.items():
        assert (item.admission, item.lease_token) == ("idle", None), does
        assert audit_types(store.sessions, item.id)[-2:] == ["action_completed", "released"]
        assert item.attempts == 0 and item.error in (None, "noted"), does
        assert dimensions(item)[("needs_work", "")] == ("false", {"by": does}), does
    assert dimensions(stored["new"])[("needs_other", "")] == ("true", {"seen": 1})
    assert dimensions(stored["change"])[("needs_other", "")] == ("true", {"seen": 2})
    changed_row = stored["change"].status("needs_other")
    assert changed_row is not None
    assert changed_row.pending_until == WAKE_AT
    assert changed_row.updated_at > before["change"].status("needs_other").updated_at  # type: ignore[union-attr]
    assert dimensions(stored["append"])[("needs_extra", "v")] == ("true", None)
    assert ("needs_other", "") not in dimensions(stored["remove"])
    assert dimensions(stored["new"])[("needs_note", "")] == ("true", None)
    columns = stored["columns"]
    assert isinstance(columns, TaskItem)
    assert (columns.error, columns.log_tail, columns.next_check_at) == (
        "noted",
        "last lines",
        CHECK_AT,
    )
    typed = stored["typed"]
    assert isinstance(typed, TaskItem)
    assert typed.payload == {"does": "typed", "seen": [1, "two", None, {"n": 1.5}]}
    assert (typed.exit_status, typed.cancel_requested, typed.started_at) == (3, True, WAKE_AT)
    # Nothing of one item's action went to another.
    for does in ("new", "change", "append", "remove", "elsewhere"):
        other = stored[does]
        assert isinstance(other, TaskItem)
        assert (other.error, other.log_tail, other.next_check_at) == (None, None, None)
        assert (other.exit_status, other.cancel_requested, other.started_at) == (None, False, None)


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("started_at", datetime(2031, 1, 1)),  # no time zone: the ORM refuses it
        ("exit_status", True),  # a bool is no integer to PostgreSQL
        ("exit_status", 1.0),
        ("kind", 7),
    ],
)
def test_a_value_json_would_not_carry_as_the_orm_does_is_left_to_the_orm(
    store: Store, column: str, value: Any
) -> None:
    item_id = submitted(store, registry(), "columns")
    with store.sessions() as session:
        item = session.get(WorkItem, item_id)
        assert isinstance(item, TaskItem)
        plain = GroupWrites()
        item.error = "plain"
        assert plain.add(item)
        setattr(item, column, value)
        assert not GroupWrites().add(item)
        session.rollback()


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_nul_in_an_error_or_output_is_written_with_its_stand_in(store: Store) -> None:
    # PostgreSQL's text and jsonb hold no NUL: written as given, the group's statement
    # failed (and the task whose output held one could never finish).
    item_id = submitted(store, registry(), "columns")
    with store.sessions() as session:
        item = session.get(WorkItem, item_id)
        assert isinstance(item, TaskItem)
        writes = GroupWrites()
        item.error, item.log_tail = "broke\x00here", "out\x00put"
        assert writes.add(item)
        writes.write(session.connection())
        session.commit()
    with store.sessions() as session:
        stored = session.get(WorkItem, item_id)
        assert isinstance(stored, TaskItem)
        assert (stored.error, stored.log_tail) == ("broke\u2400here", "out\u2400put")
