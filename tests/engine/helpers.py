"""Helpers for engine tests: submitting chain items and reading their state."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from sqlalchemy import Engine, event, func, select
from sqlalchemy.orm import Session, sessionmaker

from tests.support.chain import new_chain_item
from tests.support.waiting import wait_for
from wq.engine import items, leases
from wq.engine.claims import claim_for_workers, item_loads
from wq.engine.config import Config
from wq.engine.listener import NotifyListener
from wq.engine.models import AuditEntry, WorkItem, utcnow
from wq.engine.registry import SubmitResult, TypeRegistry
from wq.engine.wakeup import Wakeup


class Listening:
    """A started `LISTEN` thread for one hub, stoppable by the `managers` fixture."""

    def __init__(self, engine: Engine, wakeup: Wakeup) -> None:
        self.listener = NotifyListener(engine, wakeup)
        self.listener.start()
        assert self.listener.wait_ready(10), "LISTEN did not take effect"

    def stop(self, grace: float | None = None) -> None:
        """Stop listening."""
        self.listener.stop()


def submit(
    sessions: sessionmaker[Session],
    registry: TypeRegistry,
    config: Config,
    project: str = "group/project",
    **fields: Any,
) -> SubmitResult:
    """Submit one chain item in its own transaction."""
    with sessions.begin() as session:
        intake = items.submit(
            session,
            new_chain_item(project, **fields),
            registry=registry,
            pool=config.pool_for(project),
            now=utcnow(),
            actor="test",
            trigger={"source": "test"},
        )
        session.expunge_all()
        return intake


def submit_many(
    sessions: sessionmaker[Session],
    registry: TypeRegistry,
    config: Config,
    projects: list[str],
) -> list[uuid.UUID]:
    """Submit one item per entry of `projects`, all in one transaction."""
    ids = []
    with sessions.begin() as session:
        for project in projects:
            intake = items.submit(
                session,
                new_chain_item(project),
                registry=registry,
                pool=config.pool_for(project),
                now=utcnow(),
                actor="test",
                trigger={"source": "test"},
            )
            assert intake.item is not None
            ids.append(intake.item.id)
    return ids


def wait_idle(
    sessions: sessionmaker[Session],
    item_ids: list[uuid.UUID],
    *,
    timeout: float = 10.0,
    message: str = "all idle",
) -> None:
    """Wait until every one of these items is idle (one query a look)."""
    busy = (
        select(func.count())
        .select_from(WorkItem)
        .where(WorkItem.id.in_(item_ids), WorkItem.admission != "idle")
    )

    def all_idle() -> bool:
        with sessions() as session:
            return session.execute(busy).scalar_one() == 0

    wait_for(all_idle, timeout=timeout, message=message)


def load(sessions: sessionmaker[Session], item_id: uuid.UUID) -> WorkItem:
    """A fresh copy of an item."""
    with sessions() as session:
        item = session.get(WorkItem, item_id)
        assert item is not None
        session.expunge_all()
        return item


def audit_types(sessions: sessionmaker[Session], item_id: uuid.UUID) -> list[str]:
    """The audit event types of an item, oldest first."""
    with sessions() as session:
        return list(
            session.execute(
                select(AuditEntry.event_type)
                .where(AuditEntry.work_item_id == item_id)
                .order_by(AuditEntry.id)
            ).scalars()
        )


def count_by(sessions: sessionmaker[Session], column: Any) -> dict[Any, int]:
    """How many items there are per value of a column."""
    from sqlalchemy import func

    with sessions() as session:
        rows = session.execute(select(column, func.count()).group_by(column))
        return {value: int(count) for value, count in rows}


def claimed(
    sessions: sessionmaker[Session], registry: TypeRegistry, count: int, item_type: str = "chain"
) -> list[leases.Claim]:
    """Lease `count` admitted items of `item_type` for workers (owner "me"), loaded as
    the daemon's claim loads them."""
    now = utcnow()
    with sessions.begin() as session:
        taken = claim_for_workers(
            session,
            owner="me",
            types=[item_type],
            free=count,
            now=now,
            lease_until=now + timedelta(seconds=30),
            load=item_loads(registry),
        )
    assert len(taken.claims) == count
    return taken.claims


def statements_during(
    engine: Engine, work: Callable[[], Any], wanted: Callable[[str], bool]
) -> int:
    """How many of the statements `work()` sent `wanted` picks (by their SQL text)."""
    seen = [0]

    def count(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        seen[0] += wanted(statement)

    event.listen(engine, "before_cursor_execute", count)
    try:
        work()
    finally:
        event.remove(engine, "before_cursor_execute", count)
    return seen[0]
