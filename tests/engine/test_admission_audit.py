"""An admission's audit row: the same documents whoever writes it, in FIFO order.

On PostgreSQL the admitting statement writes the admissions' audit rows itself; on
SQLite the commit writes them. Either way each row holds the item's lane, seq and
project before and after, the dispatcher's trigger and the time the item waited in
line; the rows follow each lane's FIFO order (projects in code point order, the alert
lane first); and each is logged once committed, as written.
"""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from sqlalchemy import select

from tests.conftest import Store, make_config
from tests.engine.helpers import submit
from tests.support.chain import Behaviour, chain_registry
from wq.engine.admission import dispatch
from wq.engine.models import AuditEntry, WorkItem


def test_admission_rows_are_the_same_documents_in_fifo_order(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    registry = chain_registry(Behaviour())
    config = make_config(store.url)
    # Projects whose code point order differs from a linguistic one.
    for project, lane in [
        ("ébc/p", "normal"),
        ("abc/p", "normal"),
        ("Zed/p", "normal"),
        ("abc/p", "alert"),
        ("abc/p", "normal"),
    ]:
        submit(store.sessions, registry, config, project, lane=lane)
    with store.sessions() as session:
        items = {item.id: item for item in session.scalars(select(WorkItem)).all()}
        session.expunge_all()
    now = max(item.queued_at for item in items.values() if item.queued_at) + timedelta(seconds=2.5)
    with caplog.at_level(logging.INFO, logger="wq.audit"):
        admitted = dispatch(store.sessions, config, clock=lambda: now)
    assert len(admitted) == 5

    with store.sessions() as session:
        rows = session.scalars(
            select(AuditEntry).where(AuditEntry.event_type == "admitted").order_by(AuditEntry.id)
        ).all()
    lane_order = {"alert": 0, "normal": 1}
    expected = sorted(
        items.values(), key=lambda item: (item.project, lane_order[item.lane], item.seq)
    )
    assert [row.work_item_id for row in rows] == [item.id for item in expected]
    for row, item in zip(rows, expected, strict=True):
        where = {"lane": item.lane, "seq": item.seq, "project": item.project}
        assert row.old_state == {"admission": "queued", **where}
        assert row.new_state == {"admission": "admitted", **where}
        assert (row.actor, row.trigger) == (
            "dispatcher",
            {"source": "dispatcher", "reason": "slot free"},
        )
        assert row.at == now
        assert item.queued_at is not None
        assert row.extra is not None
        waited = (now - item.queued_at).total_seconds()
        assert row.extra["queued_seconds"] == pytest.approx(waited, abs=1e-6)

    # Logged once committed, one line per row, in the same order and with the same
    # documents.
    logged = [
        record.audit  # type: ignore[attr-defined]
        for record in caplog.records
        if getattr(record, "audit", {}).get("event_type") == "admitted"
    ]
    assert [entry["work_item_id"] for entry in logged] == [str(row.work_item_id) for row in rows]
    for entry, row in zip(logged, rows, strict=True):
        assert (entry["old_state"], entry["new_state"]) == (row.old_state, row.new_state)
        assert entry["metadata"]["queued_seconds"] == pytest.approx(
            row.extra["queued_seconds"] if row.extra else None, abs=1e-6
        )
