"""One event stored for several items by one statement (PostgreSQL).

The statement takes the items' intake locks (`store.lock_item`'s, computed by the
server from the ids, in id order so that two intakes cannot deadlock), inserts a
`pending_events` row per item once it holds them all, and NOTIFYs the other replicas
of each. Its items come from a read given as SQL, rows of the item's id and the
event's time there: a list of them (`insert_events`), or the lookup that finds them,
so that the webhook finds and stores an event in one round trip
(`wq.daemon.loop_events`). It answers the ids it stored the event for.

The SQL is the driver's (psycopg's `%(name)s` parameters), so that a lookup compiled
for the driver can be put in it as it is.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from wq.engine import jsontext
from wq.engine.store import ITEM_LOCK_SPACE, NOTIFY_CHANNEL, item_lock_key_sql
from wq.engine.wakeup import EVENT_STORED

# This statement's own parameters start so; a lookup put in it must use none such.
PREFIX = "intake_"

_STORE = """
WITH found AS MATERIALIZED ({found}),
locked AS MATERIALIZED (
    SELECT count(pg_advisory_xact_lock(%(intake_space)s, {key})) AS keys
    FROM (SELECT id FROM found ORDER BY id) AS ordered
), stored AS (
    INSERT INTO pending_events (work_item_id, event_type, payload, event_at, created_at)
    SELECT found.id, %(intake_event_type)s, CAST(%(intake_payload)s AS jsonb), found.at,
        %(intake_now)s
    FROM locked, found WHERE locked.keys >= 0
)
SELECT found.id, pg_notify(%(intake_channel)s, %(intake_notify)s || CAST(found.id AS text))
FROM locked, found WHERE locked.keys >= 0
"""

# The items given as JSON: [{"id": ..., "at": ...}].
_GIVEN = (
    "SELECT given.id, given.at FROM jsonb_to_recordset(CAST(%(intake_items)s AS jsonb))"
    " AS given (id uuid, at timestamptz)"
)

# The items a lookup finds, at its event's time, and those given (found by earlier
# lookups); an item both name takes the lookup's time.
_LOOKED_UP = """
SELECT DISTINCT ON (id) id, at FROM (
    SELECT looked_up.id, CAST(%(intake_at)s AS timestamptz) AS at, 1 AS rank
    FROM ({lookup}) AS looked_up (id)
    UNION ALL
    SELECT given.id, given.at, 0 FROM ({given}) AS given
) AS candidates
ORDER BY id, rank DESC
"""


def _statement(found: str) -> str:
    return _STORE.format(found=found, key=item_lock_key_sql("ordered.id"))


GIVEN_ITEMS_SQL = _statement(_GIVEN)


@functools.lru_cache(maxsize=64)
def lookup_and_store_sql(lookup: str) -> str:
    """The statement storing the event for the items `lookup` (driver SQL selecting item
    ids) finds, at `intake_at`, and for those given (`params(..., items=...)`)."""
    if f"%({PREFIX}" in lookup:
        raise ValueError(f"a lookup's parameters must not start with {PREFIX!r}")
    return _statement(_LOOKED_UP.format(lookup=lookup, given=_GIVEN))


def params(
    *,
    items: Sequence[tuple[uuid.UUID, datetime | None]],
    event_type: str,
    payload_json: str,
    now: datetime,
    origin: str,
    event_at: datetime | None = None,
) -> Mapping[str, Any]:
    """The statement's parameters: `items` given (item id, the event's time there), the
    event (`payload_json`: its JSON text), and `origin`, the wake-up hub that knows of it
    already (its listener skips these NOTIFYs); `event_at`: a lookup's event time."""
    return {
        "intake_items": jsontext.dumps(
            [{"id": str(item_id), "at": at and at.isoformat()} for item_id, at in items]
        ),
        "intake_at": event_at,
        "intake_space": ITEM_LOCK_SPACE,
        "intake_event_type": event_type,
        "intake_payload": payload_json,
        "intake_now": now,
        "intake_channel": NOTIFY_CHANNEL,
        "intake_notify": f"{origin}|{EVENT_STORED}:",
    }


def insert_events(
    session: Session,
    items: Sequence[tuple[uuid.UUID, datetime | None]],
    event_type: str,
    payload_json: str,
    *,
    now: datetime,
    origin: str,
) -> None:
    """Store one event (`payload_json`, JSON text) for each of `items` (item id, the
    event's time there) in the session's transaction, which holds their intake locks
    until it ends, and NOTIFY the other replicas on commit."""
    session.connection().exec_driver_sql(  # the connection: no autoflush before it
        GIVEN_ITEMS_SQL,
        dict(
            params(
                items=items,
                event_type=event_type,
                payload_json=payload_json,
                now=now,
                origin=origin,
            )
        ),
    )
