"""Readiness dimensions written by `set_dimension`: what a later reader finds, and when
a deferred one (`pending_until`) needs action."""

from __future__ import annotations

import uuid
from datetime import timedelta

from sqlalchemy import select

from tests.conftest import Store
from tests.engine.helpers import load
from tests.support.chain import new_chain_item
from wq.engine.dimensions import first_actionable, is_actionable, set_dimension
from wq.engine.models import WorkItem, WorkItemStatus, utcnow


def _rows(store: Store, item_id: uuid.UUID) -> list[tuple[str, str]]:
    with store.sessions() as session:
        return [
            (row.dimension, row.status)
            for row in session.execute(
                select(WorkItemStatus)
                .where(WorkItemStatus.work_item_id == item_id)
                .order_by(WorkItemStatus.dimension)
            ).scalars()
        ]


def test_a_new_item_and_its_dimension_are_written_together(store: Store) -> None:
    with store.sessions.begin() as session:
        item = new_chain_item()
        session.add(item)  # not flushed: no id in the database yet
        set_dimension(session, item, "needs_a", True)
    assert _rows(store, item.id) == [("needs_a", "true")]


def test_dimensions_of_a_loaded_item_read_back_within_and_after_the_transaction(
    store: Store,
) -> None:
    with store.sessions.begin() as session:
        item = new_chain_item()
        session.add(item)
    with store.sessions.begin() as session:
        loaded = session.get(WorkItem, item.id)
        assert loaded is not None
        set_dimension(session, loaded, "needs_b", True)
        set_dimension(session, loaded, "needs_a", True)
        set_dimension(session, loaded, "needs_b", False)  # the same row again
        assert [(r.dimension, r.status) for r in loaded.statuses] == [
            ("needs_b", "false"),
            ("needs_a", "true"),
        ]
        # A query in the same transaction sees them (flushed first).
        count = session.execute(
            select(WorkItemStatus).where(WorkItemStatus.work_item_id == item.id)
        ).all()
        assert len(count) == 2
    assert _rows(store, item.id) == [("needs_a", "true"), ("needs_b", "false")]
    assert load(store.sessions, item.id).status("needs_b").status == "false"  # type: ignore[union-attr]


def test_a_rolled_back_dimension_is_gone_from_the_item_too(store: Store) -> None:
    with store.sessions.begin() as session:
        item = new_chain_item()
        session.add(item)
    with store.sessions() as session:
        loaded = session.get(WorkItem, item.id)
        assert loaded is not None
        set_dimension(session, loaded, "needs_a", True)
        session.flush()
        session.rollback()
        assert loaded.status("needs_a") is None
        assert loaded.statuses == []
    assert _rows(store, item.id) == []


def test_a_deferred_dimension_needs_no_action_until_its_time(store: Store) -> None:
    now = utcnow()
    later = now + timedelta(minutes=5)
    with store.sessions.begin() as session:
        item = new_chain_item()
        session.add(item)
        set_dimension(session, item, "needs_a", True, pending_until=later)
        set_dimension(session, item, "needs_b", True)
    loaded = load(store.sessions, item.id)  # as stored: the deferral survives the round trip

    assert not is_actionable(loaded, "needs_a", now)
    assert first_actionable(loaded, ["needs_a", "needs_b"], now) == "needs_b"
    assert is_actionable(loaded, "needs_a", later)
    assert first_actionable(loaded, ["needs_a", "needs_b"], later) == "needs_a"
