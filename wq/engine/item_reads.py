"""How a worker reads its item: once before its first action, and again when changed.

A claim on PostgreSQL hands the worker its item as loaded; otherwise the worker reads
it once, outside any write transaction. Before it stores an action's writes or lets
go, it locks the item under its lease (the fence) and compares the stamp it finds
with the one it read: only an item someone changed meanwhile is read again.
"""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import Select
from sqlalchemy.orm import Session

from wq.engine.db import READ_ONLY_OPTION
from wq.engine.fence import lock_lease
from wq.engine.item_loading import item_query
from wq.engine.models import WorkItem
from wq.engine.registry import TypeRegistry


class ItemReads:
    """The reads of claimed items of a registry's types (statements built once)."""

    def __init__(self, registry: TypeRegistry) -> None:
        self._registry = registry
        self._statement: Select[Any] | None = None

    def read(self, session: Session, item_id: uuid.UUID) -> WorkItem | None:
        """The item with its details and dimensions: one query, and no transaction on
        PostgreSQL (autocommit), a reader's transaction on SQLite."""
        session.connection(execution_options=_read_options(session))
        item = session.execute(self._load, {"item_ids": [item_id]}).unique().scalar_one_or_none()
        session.commit()
        return item

    def lock(self, session: Session, item: WorkItem, token: str) -> bool | None:
        """Lock the item under its lease; whether it changed since read (None: lease lost).

        The lock goes ahead of any write the session has yet to flush. A changed item
        is read again (after those writes). The transaction stays open, holding the lock.
        """
        stamp = lock_lease(session.connection(), item.id, token)
        if stamp is None:
            session.rollback()
            return None
        if stamp == item.stamp:
            return False
        self.reread(session, item.id)
        return True

    def reread(self, session: Session, item_id: uuid.UUID) -> WorkItem:
        """The item read again into the session, over what it had loaded."""
        reload = self._load.execution_options(populate_existing=True)
        item: WorkItem = session.execute(reload, {"item_ids": [item_id]}).unique().scalar_one()
        return item

    @property
    def _load(self) -> Select[Any]:
        """One query for an item of any registered type, its details and dimensions."""
        if self._statement is None:
            self._statement = item_query(self._registry)
        return self._statement


def _read_options(session: Session) -> dict[str, Any]:
    if session.get_bind().dialect.name == "postgresql":
        # A single statement needs no transaction: no BEGIN and COMMIT round trips.
        return {"isolation_level": "AUTOCOMMIT"}
    return {READ_ONLY_OPTION: True}  # SQLite: a deferred transaction, never waits
