"""An item's pending events: stored, not yet applied, in the order they will be applied.

The page is `WHERE work_item_id = ? [AND id > cursor] ORDER BY id LIMIT n`, served by the
`work_item_id` index of pending_events. Events are drained as soon as the item's worker
gets to them, so an item rarely has more than a handful: the sort is over those only.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from wq.engine.models import PendingEvent


@dataclass(frozen=True)
class PendingPage:
    """Pending events of one item, oldest first; `next_after` continues the listing."""

    events: list[PendingEvent]
    next_after: int | None


def pending_events(
    session: Session, *, item_id: uuid.UUID, limit: int, after: int | None = None
) -> PendingPage:
    """Up to `limit` pending events of `item_id` with an id above `after` (all if None)."""
    query = select(PendingEvent).where(PendingEvent.work_item_id == item_id)
    if after is not None:
        query = query.where(PendingEvent.id > after)
    rows = list(session.execute(query.order_by(PendingEvent.id).limit(limit + 1)).scalars())
    page = rows[:limit]
    more = len(rows) > limit and bool(page)
    return PendingPage(events=page, next_after=page[-1].id if more else None)
