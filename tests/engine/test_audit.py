"""The audit function: conventions it enforces, the entry's JSON form, the log line."""

from __future__ import annotations

import json
import logging
import uuid
from datetime import UTC, datetime

import pytest
from sqlalchemy import func, select

from tests.conftest import Store
from wq.daemon.logs import JsonLineFormatter
from wq.engine.audit import AuditRecord, audit, document, on_committed
from wq.engine.models import AuditEntry


def test_an_entry_without_a_trigger_source_or_actor_is_refused() -> None:
    with pytest.raises(ValueError, match="no trigger source"):
        AuditRecord("queued", "system", trigger={"reason": "x"})
    with pytest.raises(ValueError, match="no actor"):
        AuditRecord("queued", "", trigger={"source": "api"})


def test_document_leaves_out_none_and_writes_utc_microseconds() -> None:
    item_id = uuid.uuid4()
    record = AuditRecord(
        "created",
        "ocp:alice",
        item_id,
        new_state={"phase": "active", "seq": None},
        trigger={"source": "api", "action": "submit"},
        at=datetime(2026, 12, 1, 7, 27, 6, 123, tzinfo=UTC),
    )
    assert document(record.row(), 42) == {
        "id": 42,
        "timestamp": "2026-12-01T07:27:06.000123Z",
        "event_type": "created",
        "work_item_id": str(item_id),
        "actor": "ocp:alice",
        "new_state": {"phase": "active"},
        "trigger": {"source": "api", "action": "submit"},
    }


def test_committed_entries_are_logged_as_json_and_wake_listeners(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    woken: list[int] = []
    remove = on_committed(lambda: woken.append(1))
    try:
        with caplog.at_level(logging.INFO, logger="wq.audit"), store.sessions.begin() as session:
            audit(session, AuditRecord("auth_failed", "anonymous", trigger={"source": "api"}))
            # Nothing before the commit (other loggers' records aside: a shared moto
            # server logs each request it answers).
            assert [r for r in caplog.records if r.name == "wq.audit"] == []
    finally:
        remove()
    assert woken == [1]
    (record,) = [r for r in caplog.records if r.name == "wq.audit"]
    line = json.loads(JsonLineFormatter().format(record))
    assert line["level"] == "INFO"
    assert line["logger"] == "wq.audit"
    assert line["audit"]["event_type"] == "auth_failed"
    assert "old_state" not in line["audit"] and "work_item_id" not in line["audit"]
    with store.sessions() as session:
        assert session.scalar(select(func.count()).select_from(AuditEntry)) == 1


def test_a_rolled_back_entry_is_neither_written_nor_logged(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="wq.audit"), store.sessions() as session:
        audit(session, AuditRecord("auth_failed", "anonymous", trigger={"source": "api"}))
        session.rollback()
    assert [r for r in caplog.records if r.name == "wq.audit"] == []
    with store.sessions() as session:
        assert session.scalar(select(func.count()).select_from(AuditEntry)) == 0


def test_nul_characters_are_audited_with_a_stand_in(store: Store) -> None:
    """PostgreSQL's text and jsonb refuse NUL: the row is kept, with ␀ in its place."""
    record = AuditRecord(
        "probe\x00",
        "actor\x00",
        None,
        trigger={"source": "api", "reason": "a\x00b"},
        metadata={"path": "/api/pools/a\x00b", "k\x00": ["\x00", 1, None]},
    )
    with store.sessions() as session:
        audit(session, record)
        session.commit()
    with store.sessions() as session:
        (row,) = session.execute(select(AuditEntry)).scalars()
    assert (row.event_type, row.actor) == ("probe␀", "actor␀")
    assert row.trigger == {"source": "api", "reason": "a␀b"}
    assert row.extra == {"path": "/api/pools/a␀b", "k␀": ["␀", 1, None]}
