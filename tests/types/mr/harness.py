"""The mr type wired to a store and the fake GitLab through the real processing loop."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from sqlalchemy import select

from tests.conftest import Store, make_config
from tests.support.waiting import wait_for
from tests.types.mr.helpers import payload
from wq.engine.dimensions import set_dimension
from wq.engine.models import AuditEntry, WorkItem, utcnow
from wq.engine.processing import ProcessingManager
from wq.engine.registry import SubmitContext, TypeRegistry
from wq.engine.sweep import sweep_once
from wq.types.mr.models import MrItem
from wq.types.mr.schemas import MrCreate
from wq.types.mr.upsert import submit_mr

PROJECT = "group/project"
DASHBOARD = "https://dashboard.example.com"


class Harness:
    """The mr type wired to a store and the fake GitLab, with a running manager."""

    def __init__(
        self, store: Store, registry: TypeRegistry, processing: dict[str, Any] | None = None
    ) -> None:
        self.store = store
        self.registry = registry
        config = make_config(store.url, processing={"workers": 2, **(processing or {})})
        self.manager = ProcessingManager(store.sessions, registry, config)

    def submit(self, **overrides: Any) -> tuple[str, uuid.UUID]:
        ctx = SubmitContext(
            registry=self.registry,
            pool=self.manager.config.pool_for(PROJECT),
            actor="tester",
            now=utcnow(),
        )
        with self.store.sessions.begin() as session:
            result = submit_mr(
                session,
                MrCreate.model_validate(payload(**overrides)),
                ctx,
                self.registry.get("mr").settings,
            )
            assert result.item_id is not None
            return result.outcome, result.item_id

    def opened(self, **overrides: Any) -> tuple[uuid.UUID, int]:
        """Submit an item and wait until its MR is open: the item's id and the MR's iid."""
        _, item_id = self.submit(**overrides)
        iid = self.settled(item_id).mr_iid
        assert iid is not None
        return item_id, iid

    def item(self, item_id: uuid.UUID) -> MrItem:
        with self.store.sessions() as session:
            item = session.get(WorkItem, item_id)
            assert isinstance(item, MrItem)
            session.expunge_all()
            return item

    def settled(self, item_id: uuid.UUID, timeout: float = 15) -> MrItem:
        """Wait until the item is idle or done, and return it."""
        wait_for(
            lambda: self.item(item_id).admission in ("idle", "done"),
            timeout=timeout,
            message="item settled",
        )
        return self.item(item_id)

    def due_now(self, item_id: uuid.UUID, dimension: str) -> None:
        """Make a deferred dimension come due and let the sweep queue the item."""
        with self.store.sessions.begin() as session:
            item = session.get(WorkItem, item_id)
            assert item is not None
            set_dimension(
                session, item, dimension, True, pending_until=utcnow() - timedelta(seconds=1)
            )
        sweep_once(self.store.sessions, self.registry, self.manager.config)

    def failures(self, item_id: uuid.UUID) -> list[str]:
        """The errors of the item's failed actions, oldest first."""
        with self.store.sessions() as session:
            triggers = session.execute(
                select(AuditEntry.trigger)
                .where(AuditEntry.work_item_id == item_id, AuditEntry.event_type == "action_failed")
                .order_by(AuditEntry.id)
            ).scalars()
            return [trigger["error"] for trigger in triggers]

    def actions(self, item_id: uuid.UUID) -> list[str]:
        with self.store.sessions() as session:
            triggers = session.execute(
                select(AuditEntry.trigger)
                .where(
                    AuditEntry.work_item_id == item_id, AuditEntry.event_type == "action_completed"
                )
                .order_by(AuditEntry.id)
            ).scalars()
            return [trigger["action"] for trigger in triggers]
