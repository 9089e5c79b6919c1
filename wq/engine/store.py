"""The dialect seam: the few statements that differ between PostgreSQL and SQLite.

Everything else in the engine is the same SQLAlchemy code on both databases. Here:
the admission sequence, the per-project and per-item locks, and the cross-process
wake-up (`NOTIFY`). The admission's lock and its set-based statement are in
`wq.engine.admission_statements`; the statements that lease admitted items (claims,
batch locks, lease ends) in `wq.engine.leases`.
"""

from __future__ import annotations

import uuid
import zlib
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import (
    BindParameter,
    ColumnElement,
    any_,
    bindparam,
    literal,
    text,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.orm import Session

from wq.engine.models import (
    SequenceCounter,
)

ADMISSION_SEQUENCE = "wq_admission_seq"
NOTIFY_CHANNEL = "wq_events"
_PROJECT_LOCK_SPACE = 0x5751  # "WQ": keeps our advisory keys apart from other users'
ITEM_LOCK_SPACE = 0x5752


def inline(value: str) -> BindParameter[str]:
    """A state constant rendered into the SQL text, not sent as a parameter.

    PostgreSQL's generic plans for prepared statements can only use the partial
    indexes (`WHERE admission = 'queued'` ...) when the value is in the statement.
    """
    return literal(value, literal_execute=True)


def is_postgres(session: Session) -> bool:
    """Whether the session's database is PostgreSQL (else SQLite)."""
    return session.get_bind().dialect.name == "postgresql"


_is_postgres = is_postgres


def among(session: Session, column: Any, values: Iterable[Any]) -> ColumnElement[bool]:
    """`column IN values`, written `column = ANY(array)` on PostgreSQL: one statement
    text whatever the count, so the driver converts it once and the server may keep
    its plan (an `IN` list is a new text for every count, converted anew when long)."""
    values = list(values)
    condition: ColumnElement[bool]
    if _is_postgres(session):
        condition = column == any_(bindparam(None, values, type_=ARRAY(column.type)))
    else:
        condition = column.in_(values)
    return condition


def _lock_key(value: str) -> int:
    # A stable 32-bit key; PostgreSQL's two-key advisory locks take int4 values.
    return zlib.crc32(value.encode()) - 2**31


def item_lock_key(item_id: uuid.UUID) -> int:
    """An item's intake lock key: the first 32 bits of its id (random in a UUIDv4), as
    `item_lock_key_sql` computes it on the server."""
    return int.from_bytes(item_id.bytes[:4], "big", signed=True)


def item_lock_key_sql(column: str) -> str:
    """SQL computing `item_lock_key` of the uuid `column`."""
    return f"CAST(CAST('x' || left(CAST({column} AS text), 8) AS bit(32)) AS integer)"


def next_seq(session: Session) -> int:
    """A fresh value of the global admission sequence; never reused, never from a clock."""
    if _is_postgres(session):
        return int(session.execute(text(f"SELECT nextval('{ADMISSION_SEQUENCE}')")).scalar_one())
    value = session.execute(
        update(SequenceCounter)
        .where(SequenceCounter.name == ADMISSION_SEQUENCE)
        .values(value=SequenceCounter.value + 1)
        .returning(SequenceCounter.value)
    ).scalar_one()
    return int(value)


def next_seqs(session: Session, count: int) -> list[int]:
    """`count` fresh values of the admission sequence, in increasing order: one statement."""
    if count <= 0:
        return []
    if _is_postgres(session):
        rows = session.execute(
            text(
                f"SELECT nextval('{ADMISSION_SEQUENCE}') AS seq"
                " FROM generate_series(1, :count) ORDER BY seq"
            ),
            {"count": count},
        )
        return [int(seq) for seq in rows.scalars()]
    last = session.execute(
        update(SequenceCounter)
        .where(SequenceCounter.name == ADMISSION_SEQUENCE)
        .values(value=SequenceCounter.value + count)
        .returning(SequenceCounter.value)
    ).scalar_one()
    return list(range(int(last) - count + 1, int(last) + 1))


def lock_project(session: Session, project: str) -> None:
    """Serialize admission of one project until the transaction ends.

    PostgreSQL: a transaction-scoped advisory lock, so two replicas admitting the same
    project queue up. SQLite: the `BEGIN IMMEDIATE` write lock already serializes.
    """
    if _is_postgres(session):
        session.execute(
            text("SELECT pg_advisory_xact_lock(:space, :key)"),
            {"space": _PROJECT_LOCK_SPACE, "key": _lock_key(project)},
        )


def lock_item(session: Session, item_id: uuid.UUID) -> None:
    """Serialize event intake and event draining for one item until the transaction ends."""
    if _is_postgres(session):
        session.execute(
            text("SELECT pg_advisory_xact_lock(:space, :key)"),
            {"space": ITEM_LOCK_SPACE, "key": item_lock_key(item_id)},
        )


def try_lock_items(session: Session, item_ids: Iterable[uuid.UUID]) -> set[uuid.UUID]:
    """`lock_item` of each of these items that no other transaction holds now, in one
    statement; the ones it locked (the others are not waited for)."""
    keys = {item_id: item_lock_key(item_id) for item_id in item_ids}
    if not _is_postgres(session):
        return set(keys)
    locked = set(
        session.execute(
            text(
                "SELECT key FROM unnest(CAST(:keys AS integer[])) AS key"
                " WHERE pg_try_advisory_xact_lock(:space, key)"
            ),
            {"space": ITEM_LOCK_SPACE, "keys": sorted(set(keys.values()))},
        ).scalars()
    )
    return {item_id for item_id, key in keys.items() if key in locked}


def notify(session: Session, payloads: Sequence[str], origin: str) -> None:
    """Tell other replicas on the same PostgreSQL about new work (delivered on commit).

    `origin` names the wake-up hub that already knows, so its listener skips them.
    """
    if payloads and _is_postgres(session):
        session.execute(
            text(
                "SELECT pg_notify(:channel, payload)"
                " FROM unnest(CAST(:payloads AS text[])) AS payload"
            ),
            {"channel": NOTIFY_CHANNEL, "payloads": [f"{origin}|{p}" for p in payloads]},
        )
