"""The mr type's own audit entries follow the field conventions (see wq.engine.audit)."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from tests.conftest import Store
from tests.types.mr.events_support import deliver, mr_event, new_item
from tests.types.mr.helpers import mr_registry
from wq.engine.models import AuditEntry


def entries(store: Store, event_type: str) -> list[AuditEntry]:
    with store.sessions() as session:
        found = session.scalars(
            select(AuditEntry).where(AuditEntry.event_type == event_type).order_by(AuditEntry.id)
        ).all()
        session.expunge_all()
        return list(found)


def test_an_event_that_asks_for_a_reconcile_is_a_system_entry_naming_the_event(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = mr_registry(monkeypatch)
    item_id = new_item(store, registry, 3, "wq/other-3")
    assert deliver(store, registry, mr_event("approved", 3, branch="wq/other-3")) == 1
    assert deliver(store, registry, mr_event("unapproved", 3, branch="wq/other-3")) == 1
    first, second = entries(store, "dimension_set")
    for entry in (first, second):
        assert (entry.work_item_id, entry.actor) == (item_id, "system")
        assert entry.new_state == {"dimension": "needs_reconcile", "status": "true"}
        assert entry.trigger is not None and entry.trigger["source"] == "event"
        assert entry.trigger["event"] == "merge_request"
    assert first.trigger is not None and first.trigger["action"] == "approved"
    assert first.old_state is None  # the dimension did not exist before
    assert second.old_state == {"dimension": "needs_reconcile", "status": "true"}
