"""Executors run fenced by their item's lease, and may not end the transaction.

While an executor runs, the first statement of its write transaction (the
executor's own, or the engine's final flush) is an UPDATE that checks the lease token
(and, on PostgreSQL, locks the row until commit): a worker that lost its lease can
write nothing that survives. A commit attempted by the executor is refused.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection, event, update
from sqlalchemy.orm import Session

from wq.engine.models import WorkItem, utcnow

_IN_EXECUTOR = "wq_in_executor"
_FENCE = "wq_fence"


class ExecutorMisbehaved(RuntimeError):
    """An executor tried to commit or roll back the engine's transaction."""


def _forbid_commit_in_executor(session: Session) -> None:
    if session.info.get(_IN_EXECUTOR):
        raise ExecutorMisbehaved("executors must not commit or roll back the session")


event.listen(Session, "before_commit", _forbid_commit_in_executor)


class LeaseLost(RuntimeError):
    """The item's lease was taken over while its action ran; its changes are discarded."""


@event.listens_for(Session, "after_begin")
def _fence_action(session: Session, _transaction: Any, connection: Connection) -> None:
    """Before an action writes anything, check (and lock) that its lease is still ours.

    The executor's first statement or the final flush begins the write transaction;
    the fence runs first in it, so no write of a worker that lost its lease survives.
    """
    fence = session.info.get(_FENCE)
    if fence is None:
        return
    item_id, token = fence
    result = connection.execute(
        update(WorkItem)
        .where(WorkItem.id == item_id, WorkItem.lease_token == token)
        .values(updated_at=utcnow())
    )
    if not result.rowcount:
        raise LeaseLost(str(item_id))


@contextmanager
def fenced_executor(session: Session, item_id: uuid.UUID, token: str) -> Iterator[None]:
    """The scope of one executor run: commits refused, writes fenced by the lease."""
    session.info[_IN_EXECUTOR] = True
    session.info[_FENCE] = (item_id, token)
    try:
        yield
    finally:
        session.info[_IN_EXECUTOR] = False
        session.info.pop(_FENCE, None)
