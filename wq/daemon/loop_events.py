"""GitLab webhook events stored on the event loop (PostgreSQL).

Storing an event takes two statements: find the items it concerns, then (one
statement, its own transaction) take their intake locks, insert a row per item and
NOTIFY the other replicas. Run in the thread pool, with a session, that cost a webhook
request most of its CPU: the hand-off to a thread and back, the threads' contest for
the GIL with the event loop, and the ORM's session around two statements. So when
every type that resolves events can do it by one read (its `event_query`), the webhook
runs both on a `LoopReads` connection in autocommit: the lookup reads no more than in
the session's transaction (a plain read, locking nothing: an item may finish between
it and the insert either way, and applying the event then finds it finished). A
connection found dead by the lookup (nothing written yet) is replaced and both run
again (`LoopReads.run`). This process's scheduler is told after the insert, as
`wq.engine.events.store_events` tells it after its commit.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta

from psycopg.rows import tuple_row

from wq.daemon.loop_reads import LoopConnection, LoopReads
from wq.engine import jsontext
from wq.engine.envelope import Event
from wq.engine.events import storable, too_far_ahead
from wq.engine.metrics import Metrics
from wq.engine.models import utcnow
from wq.engine.registry import EventQuery
from wq.engine.store import INSERT_EVENTS_PG, insert_events_params
from wq.engine.wakeup import EVENT_STORED, Wakeup


async def ingest_on_loop(
    reads: LoopReads,
    queries: Sequence[EventQuery],
    event: Event,
    *,
    wakeup: Wakeup,
    metrics: Metrics,
    source: str,
    max_future_skew: timedelta,
) -> int:
    """Store `event` for every item `queries` find for it, in one transaction; return
    how many (as `wq.engine.events.ingest` does, with the same counts and log lines)."""
    metrics.count_event(source, "received")
    latest = utcnow() + max_future_skew
    lookups = [query(event.event_type, event.payload) for query in queries]
    statements = [
        (lookup.event_at, reads.bound(lookup.statement, lookup.params))
        for lookup in lookups
        if lookup.statement is not None
    ]
    if not statements:
        metrics.count_event(source, "unmatched")
        return 0
    insert_sql = reads.bound(INSERT_EVENTS_PG, {})[0]
    payload_json = jsontext.dumps(storable(event.payload))

    async def attempt(connection: LoopConnection) -> dict[uuid.UUID, datetime | None] | None:
        targets: dict[uuid.UUID, datetime | None] = {}
        for event_at, (sql, params) in statements:
            cursor = connection.cursor(row_factory=tuple_row)
            await cursor.execute(sql, params)
            ids = [row[0] for row in await cursor.fetchall()]
            if ids and too_far_ahead(metrics, source, event.event_type, event_at, latest):
                return None
            targets.update(dict.fromkeys(ids, event_at))
        if targets:
            # From here a failure is not retried: the insert may have taken effect.
            connection.answered = True
            ordered = sorted(targets)
            await connection.execute(
                insert_sql,
                insert_events_params(
                    [(item_id, targets[item_id]) for item_id in ordered],
                    event.event_type,
                    payload_json,
                    utcnow(),
                    [f"{wakeup.origin}|{EVENT_STORED}:{item_id}" for item_id in ordered],
                ),
            )
        return targets

    first_sql, first_params = statements[0][1]
    targets = await reads.run(first_sql, first_params, attempt)
    if targets is None:
        return 0
    for item_id in targets:  # this process's scheduler (its listener skips our NOTIFYs)
        wakeup.deliver(EVENT_STORED, str(item_id))
    metrics.count_event(source, "stored" if targets else "unmatched")
    return len(targets)
