"""GitLab webhook events stored on the event loop (PostgreSQL).

Run in the thread pool, with a session, storing an event cost a webhook request most
of its CPU: the hand-off to a thread and back, the threads' contest for the GIL with
the event loop, and the ORM's session around its statements. So when every type that
resolves events can do it by one read (its `event_query`), the webhook stores the event
on a `LoopReads` connection in autocommit, by one statement: the lookup, the items'
intake locks, a row per item and the NOTIFYs to the other replicas
(`wq.engine.event_inserts`). The lookup reads no more than in the session's
transaction did (a plain read, locking nothing: an item may finish before the event
is applied either way, and applying it then finds it finished). With several lookups,
all but the last run first as reads; so does a lookup dated further ahead than the
allowed skew (the event is refused if it finds an item).

A connection taken idle and found dead by the statement (a server restart since its
last use) is replaced and the statement sent again (`LoopReads.run`). Had the server
stored the event and died before answering, it is stored twice; a webhook's delivery
is at least once anyway (GitLab sends an event again when it is not answered), and
applying an event twice finds the second one stale or changes nothing. This process's
scheduler is told after the statement, as `wq.engine.events.store_events` tells it
after its commit.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta

from psycopg.rows import tuple_row

from wq.daemon.loop_reads import LoopConnection, LoopReads
from wq.engine import jsontext
from wq.engine.envelope import Event, may_spell_nul
from wq.engine.event_inserts import GIVEN_ITEMS_SQL, lookup_and_store_sql, params
from wq.engine.events import storable, too_far_ahead
from wq.engine.metrics import Metrics
from wq.engine.models import utcnow
from wq.engine.registry import EventQuery
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
    reads_first = [
        (lookup.event_at, reads.bound(lookup.statement, lookup.params))
        for lookup in lookups
        if lookup.statement is not None
    ]
    if not reads_first:
        metrics.count_event(source, "unmatched")
        return 0
    event_at, (lookup_sql, lookup_params) = reads_first[-1]
    if event_at is not None and event_at > latest:
        # Read first like the others: the event is refused if it finds an item.
        sql, lookup_params, stores_lookup = GIVEN_ITEMS_SQL, {}, False
    else:
        sql, stores_lookup = lookup_and_store_sql(lookup_sql), True
        reads_first.pop()
    payload_json = jsontext.dumps(event.payload)
    if may_spell_nul(payload_json):  # JSON writes NUL as an escape: look for it only then
        payload_json = jsontext.dumps(storable(event.payload))

    async def attempt(connection: LoopConnection) -> list[uuid.UUID] | None:
        found: dict[uuid.UUID, datetime | None] = {}
        for read_at, (read_sql, read_params) in reads_first:
            cursor = connection.cursor(row_factory=tuple_row)
            await cursor.execute(read_sql, read_params)
            ids = [row[0] for row in await cursor.fetchall()]
            connection.answered = True  # alive: from here a failure is not retried
            if ids and too_far_ahead(metrics, source, event.event_type, read_at, latest):
                return None
            found.update(dict.fromkeys(ids, read_at))
        if not (stores_lookup or found):
            return []
        cursor = connection.cursor(row_factory=tuple_row)
        await cursor.execute(
            sql,
            {
                **lookup_params,
                **params(
                    items=sorted(found.items()),
                    event_type=event.event_type,
                    payload_json=payload_json,
                    now=utcnow(),
                    origin=wakeup.origin,
                    event_at=event_at if stores_lookup else None,
                ),
            },
        )
        return [row[0] for row in await cursor.fetchall()]

    stored = await reads.run(sql, lookup_params, attempt)
    if stored is None:
        return 0
    for item_id in stored:  # this process's scheduler (its listener skips our NOTIFYs)
        wakeup.deliver(EVENT_STORED, str(item_id))
    metrics.count_event(source, "stored" if stored else "unmatched")
    return len(stored)
