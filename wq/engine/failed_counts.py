"""The failed items per type, read from the rows the database's triggers keep.

Failed items stay (an operator retries or cancels them), so counting them grows with
history. Instead, triggers on `work_items` (migration 0014) insert a row of +1 or -1
into `failed_counts` whenever an item enters or leaves `failed`: a type's count is the
sum of its rows. Inserting a row never waits for another transaction, unlike one
counter row per type would. The sweep folds the rows into one per type, so a reading
sums a handful of rows whatever the history.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import delete, func, select, text
from sqlalchemy.orm import Session

from wq.engine import store
from wq.engine.models import FailedCount

# One statement: the rows it sums are the rows it deletes.
_FOLD_PG = text(
    """
    WITH gone AS (DELETE FROM failed_counts RETURNING type, delta),
         folded AS (
             INSERT INTO failed_counts (type, delta)
             SELECT type, sum(delta) FROM gone GROUP BY type HAVING sum(delta) <> 0
             RETURNING 1
         )
    SELECT count(*) FROM gone
    """
)


def failed_per_type(session: Session, types: Sequence[str]) -> dict[str, int]:
    """How many items of each of `types` are failed now (types with none are left out)."""
    rows = session.execute(
        select(FailedCount.type, func.sum(FailedCount.delta))
        .where(FailedCount.type.in_(sorted(types)))
        .group_by(FailedCount.type)
    )
    return {str(item_type): int(total) for item_type, total in rows if total}


def fold(session: Session) -> int:
    """Replace the rows by one per type holding its sum; return how many rows went.

    On PostgreSQL the rows summed are exactly the rows deleted (rows triggers add
    meanwhile stay, to be folded next time). SQLite has one writer at a time: the
    transaction sees every row until it commits.
    """
    if store.is_postgres(session):
        return int(session.execute(_FOLD_PG).scalar_one())
    totals = session.execute(
        select(FailedCount.type, func.sum(FailedCount.delta), func.count()).group_by(
            FailedCount.type
        )
    ).all()
    session.execute(delete(FailedCount))
    session.add_all(
        FailedCount(type=str(item_type), delta=int(total))
        for item_type, total, _ in totals
        if total
    )
    return sum(int(rows) for _, _, rows in totals)
