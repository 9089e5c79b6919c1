"""`updated_at` moves when a flush changes an item's state, not when it only moves the
lease or the schedule (`wq.engine.models`): the list's "since" and the TUI read it."""

from __future__ import annotations

from datetime import timedelta

from tests.conftest import Store
from tests.engine.helpers import submit
from tests.support.chain import Behaviour, chain_registry
from wq.engine.models import WorkItem, utcnow


def _updated_after(store: Store, item_id: object, **values: object) -> bool:
    """Set `values` on the item in one transaction; whether its `updated_at` moved."""
    with store.sessions.begin() as session:
        item = session.get(WorkItem, item_id)
        assert item is not None
        before = item.updated_at
        for name, value in values.items():
            setattr(item, name, value)
    with store.sessions() as session:
        item = session.get(WorkItem, item_id)
        assert item is not None
        return item.updated_at != before


def test_a_state_change_moves_updated_at_and_the_lease_alone_does_not(store: Store) -> None:
    registry = chain_registry(Behaviour())
    item_id = submit(store.sessions, registry, store.config).item_id
    later = utcnow() + timedelta(minutes=5)

    assert not _updated_after(store, item_id, lease_owner="w", leased_until=later, run_after=later)
    with store.sessions() as session:
        item = session.get(WorkItem, item_id)
        assert item is not None
        error, attempts = item.error, item.attempts
    assert not _updated_after(store, item_id, error=error, attempts=attempts)  # same values
    assert _updated_after(store, item_id, error="boom")
    assert _updated_after(store, item_id, attempts=attempts + 1, lease_owner=None)
