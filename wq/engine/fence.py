"""Executors run fenced by their item's lease, and may not end the transaction.

While an executor runs, the first statement of its transaction (the executor's
own; after an executor that sent none, the engine's fence) checks the lease token
and, on PostgreSQL, locks the item's row until commit (`SELECT ... FOR UPDATE`;
SQLite's `BEGIN IMMEDIATE` already excludes every other writer): a worker that lost
its lease can write nothing that survives. The fence also reads the item's `stamp`, so
the worker knows whether anyone changed the item since it read it. A commit
attempted by the executor is refused.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import Connection, Table, bindparam, event, select
from sqlalchemy.orm import Session

from wq.engine.models import EXECUTOR_SESSION, WorkItem

# True while an executor runs; present (True or False) in every session that runs
# executors: such a session holds its items' leases (see `models.changes._stamp_changes`).
_IN_EXECUTOR = EXECUTOR_SESSION
_FENCE = "wq_fence"
_ITEMS = cast(Table, WorkItem.__table__)
# The lease check: the item's stamp while the token holds its lease, its row locked.
_LOCK = (
    select(_ITEMS.c.stamp)
    .where(_ITEMS.c.id == bindparam("item_id"), _ITEMS.c.lease_token == bindparam("token"))
    .with_for_update()
)


class ExecutorMisbehaved(RuntimeError):
    """An executor tried to commit or roll back the engine's transaction."""


def _forbid_commit_in_executor(session: Session) -> None:
    if session.info.get(_IN_EXECUTOR):
        raise ExecutorMisbehaved("executors must not commit or roll back the session")


event.listen(Session, "before_commit", _forbid_commit_in_executor)


class LeaseLost(RuntimeError):
    """The item's lease was taken over while its action ran; its changes are discarded."""


def lock_lease(connection: Connection | Session, item_id: uuid.UUID, token: str) -> int | None:
    """The item's stamp, its row locked until commit, while `token` holds its lease.

    None when the lease is no longer the token's. The lock is a row lock, not an
    UPDATE: no new row version is written for it.
    """
    stamp = connection.execute(_LOCK, {"item_id": item_id, "token": token}).scalar_one_or_none()
    return None if stamp is None else int(stamp)


@dataclass
class Fence:
    """One executor run's fence; `stamp` is what it found once the transaction began."""

    item_id: uuid.UUID
    token: str
    stamp: int | None = None


@event.listens_for(Session, "after_begin")
def _fence_action(session: Session, _transaction: Any, connection: Connection) -> None:
    """Before an action reads or writes anything, check (and lock) that its lease is ours.

    The executor's first statement or the final flush begins the transaction; the
    fence runs first in it, so no write of a worker that lost its lease survives, and
    what the executor reads of the item cannot change before it commits.
    """
    fence = session.info.get(_FENCE)
    if fence is None:
        return
    stamp = lock_lease(connection, fence.item_id, fence.token)
    if stamp is None:
        raise LeaseLost(str(fence.item_id))
    fence.stamp = stamp


@contextmanager
def fenced_executor(session: Session, item_id: uuid.UUID, token: str) -> Iterator[Fence]:
    """The scope of one executor run: commits refused, the transaction fenced by the lease.

    The fence's `stamp` is set once the executor's first statement has begun the
    transaction. It is still None after an executor that sent none: then nothing is
    locked yet, and the caller must fence before it writes anything (`lock_lease`, or
    a statement with the same condition).
    """
    fence = Fence(item_id, token)
    session.info[_IN_EXECUTOR] = True
    session.info[_FENCE] = fence
    try:
        yield fence
    finally:
        session.info[_IN_EXECUTOR] = False
        session.info.pop(_FENCE, None)
