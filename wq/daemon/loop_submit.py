"""Unchanged submissions answered on the event loop (PostgreSQL).

Callers send their desired state again and again, so most submissions leave their item
as it is. A type's `UnchangedCheck` tells such a one from the item's locked row; its
answer then needs that row, the item's dimensions and the allow's audit entry. Those
are one transaction on a `LoopReads` connection, in psycopg's pipeline mode: BEGIN
with the locked read in one round trip, the dimensions, the audit row and COMMIT in
another; no thread hop, no session. A connection found dead by the first round trip
(nothing written yet) is replaced and the transaction run again (`LoopReads.run`). A
submission that changes something goes to the type's handler in the thread pool, as
every submission does on SQLite.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import namedtuple_row

from wq.daemon.loop_reads import LoopConnection, LoopReads
from wq.daemon.reads import dimensions_of_one
from wq.daemon.schemas import dimension_document
from wq.engine.audit import INSERT_AUDIT, AuditRecord, announce_committed, column_values
from wq.engine.registry import UnchangedCheck


@dataclass(frozen=True)
class Unchanged:
    """An item a submission left as it was: its row as the check read it, locked, and
    its dimensions as documents, read under that lock."""

    row: Any
    dimensions: list[dict[str, Any]]


async def unchanged_on_loop(
    reads: LoopReads, check: UnchangedCheck, payload: Any, allowed: AuditRecord | None
) -> Unchanged | None:
    """The item, if `check` holds for `payload`, with `allowed` audited; else None and
    nothing written (the caller hands the submission to the type's handler)."""
    sql, params = reads.bound(check.statement, check.params(payload))
    entry = None if allowed is None else allowed.row()

    async def attempt(connection: LoopConnection) -> Unchanged | None:
        holds = False
        # COMMIT is sent as the pipeline ends: the dimensions' rows arrive with its answer.
        async with connection.pipeline(), connection.transaction():
            locked = connection.cursor(row_factory=namedtuple_row)
            await locked.execute(sql, params)
            found = await locked.fetchall()
            # Past the first round trip (BEGIN and a locked read, nothing written): a
            # failure from here on is not retried (`LoopReads.run`).
            connection.answered = True
            row: Any = found[0] if found else None
            holds = check.holds(row, payload)
            if not holds:
                raise psycopg.Rollback()
            dimensions = connection.cursor(row_factory=namedtuple_row)
            await dimensions.execute(*reads.bound(*dimensions_of_one(row.id)))
            if entry is not None:
                await connection.execute(INSERT_AUDIT, column_values(entry))
        if not holds:
            return None
        return Unchanged(row, [dimension_document(each) for each in await dimensions.fetchall()])

    unchanged = await reads.run(sql, params, attempt)
    if unchanged is not None and entry is not None:
        announce_committed([entry])
    return unchanged
