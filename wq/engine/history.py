"""An item's history: its audit entries, newest first, one page at a time.

The page is `WHERE work_item_id = ? [AND id < cursor] ORDER BY id DESC LIMIT n`, served
by the `(work_item_id, id)` index of audit_log: it reads only the rows it returns, however
long the log is. `id` (not `at`) orders, because several rows can share a timestamp.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from sqlalchemy import Select, select
from sqlalchemy.orm import Session

from wq.engine.models import AuditEntry


@dataclass(frozen=True)
class HistoryPage:
    """Audit entries of one item, newest first; `next_before` continues the listing."""

    entries: list[AuditEntry]
    next_before: int | None


def history_query(item_id: uuid.UUID, limit: int, before: int | None) -> Select[AuditEntry]:
    """The page query: one row more than `limit`, to tell whether another page follows."""
    query = select(AuditEntry).where(AuditEntry.work_item_id == item_id)
    if before is not None:
        query = query.where(AuditEntry.id < before)
    return query.order_by(AuditEntry.id.desc()).limit(limit + 1)


def item_history(
    session: Session, *, item_id: uuid.UUID, limit: int, before: int | None = None
) -> HistoryPage:
    """Up to `limit` audit entries of `item_id` with an id below `before` (all if None)."""
    rows = list(session.execute(history_query(item_id, limit, before)).scalars())
    page = rows[:limit]
    more = len(rows) > limit and bool(page)
    return HistoryPage(entries=page, next_before=page[-1].id if more else None)
