"""The audit trail: every audited state change goes through `audit()`.

One entry is one `audit_log` row, written with the transaction that made the change;
once that commits, the entry is logged at INFO on `wq.audit` and the archiver (when
S3 archival is on, see `wq.engine.archive`) is woken to upload it. The database row
is the source of truth for both.

Field conventions (the work-queue-service spec's):

- `actor`: the caller identity for API and auth entries, the worker's name for worker
  entries, "system" (or the engine part: "dispatcher", "sweep") for the rest;
- `old_state` / `new_state`: the item's state before and after, same keys in both;
  `old_state` is omitted on creation and on auth entries; None values are dropped;
- `trigger`: always a `source` (api, worker, decider, dispatcher, event, sweep, ...),
  plus `action` for deliberate operations, `reason` for system and error transitions,
  `error` for failure details;
- `metadata`: context beside the transition (request details, type data on submit).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from sqlalchemy import Table, delete, func, insert, select
from sqlalchemy.orm import Session

from wq.engine import jsontext, on_commit
from wq.engine.driver_reads import as_sqlalchemy_errors
from wq.engine.models import AuditEntry, utcnow
from wq.engine.models.base import without_nul

log = logging.getLogger("wq.audit")
AUDIT_TABLE: Table = cast(Table, AuditEntry.__table__)

# Called (without arguments) after audit rows committed: the archiver's wake-up.
_committed_listeners: list[Callable[[], None]] = []


@dataclass
class AuditRecord:
    """One audit entry before it is written."""

    event_type: str
    actor: str
    work_item_id: uuid.UUID | None = None
    old_state: dict[str, Any] | None = None
    new_state: dict[str, Any] | None = None
    trigger: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] | None = None
    at: datetime = field(default_factory=utcnow)

    def __post_init__(self) -> None:
        # Enforced here, so that no caller can write an entry nobody can attribute.
        if not self.actor:
            raise ValueError(f"audit entry {self.event_type!r} has no actor")
        if not self.trigger.get("source"):
            raise ValueError(f"audit entry {self.event_type!r} has no trigger source")

    def row(self) -> dict[str, Any]:
        """The audit_log row for this record."""
        return {
            "at": self.at,
            "event_type": self.event_type,
            "work_item_id": self.work_item_id,
            "actor": self.actor,
            "old_state": _compact(self.old_state),
            "new_state": _compact(self.new_state),
            "trigger": _compact(self.trigger),
            "metadata": _compact(self.metadata),
        }


def _compact(state: dict[str, Any] | None) -> dict[str, Any] | None:
    if state is None or None not in state.values():
        return state  # nothing to drop (most states): no copy
    return {key: value for key, value in state.items() if value is not None}


def timestamp(at: datetime) -> str:
    """An entry's time as written in its log line and archive: ISO 8601, UTC, microseconds."""
    global _last_timestamp
    last_at, last_text = _last_timestamp  # one tuple: read and replaced whole by threads
    if at == last_at:  # the rows of one admission pass share their time
        return last_text
    # isoformat: strftime cost a few percent of an unchanged submission's CPU.
    if at.tzinfo is UTC:  # as the engine makes them: only "+00:00" to replace
        text = at.isoformat(timespec="microseconds")[:-6] + "Z"
    else:
        text = at.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"
    _last_timestamp = (at, text)
    return text


_last_timestamp: tuple[datetime | None, str] = (None, "")


def document(row: dict[str, Any], entry_id: int | None = None) -> dict[str, Any]:
    """The JSON form of one entry (log line, S3 object): None fields are left out."""
    # Built key by key (not a dict filtered afterwards): every audit line makes one.
    entry: dict[str, Any] = {} if entry_id is None else {"id": entry_id}
    entry["timestamp"] = timestamp(row["at"])
    entry["event_type"] = row["event_type"]
    item_id = row.get("work_item_id")
    if item_id is not None:
        entry["work_item_id"] = str(item_id)
    entry["actor"] = row["actor"]
    for key in ("old_state", "new_state", "trigger", "metadata"):
        value = row.get(key)
        if value is not None:
            entry[key] = value
    return entry


def audit(session: Session, *records: AuditRecord) -> None:
    """Record audit entries: their rows are written in one statement when the
    transaction commits, then logged (and archived, when archival is on)."""
    for record in records:
        on_commit.defer(session, "audit", record.row())


def on_committed(listener: Callable[[], None]) -> Callable[[], None]:
    """Call `listener` after every commit that wrote audit rows; returns the remover."""
    _committed_listeners.append(listener)
    return lambda: _committed_listeners.remove(listener)


_COPY_AUDIT = (
    "COPY audit_log (at, event_type, work_item_id, actor, old_state, new_state, "
    '"trigger", metadata) FROM STDIN'
)


def json_column_text(value: Any) -> str:
    """A JSON column's text for COPY, as the JSON type binds it (None as JSON null)."""
    text = jsontext.dumps(value)
    # The escape shows up in the text only if a NUL may be in the value (checking the
    # text is cheaper than walking every value).
    return jsontext.dumps(without_nul(value)) if "\\u0000" in text else text


# One entry's row through the driver (PostgreSQL), `column_values` bound in order.
INSERT_AUDIT = (
    "INSERT INTO audit_log (at, event_type, work_item_id, actor, old_state, new_state, "
    '"trigger", metadata) VALUES (%s, %s, %s, %s, %s::jsonb, %s::jsonb, %s::jsonb, %s::jsonb)'
)
# A COPY takes two round trips (its start, then the data); an INSERT of a few rows one.
_INSERT_AT_MOST = 2


@on_commit.before("audit")
def _write(session: Session, rows: list[dict[str, Any]]) -> None:
    connection = session.connection()
    if connection.dialect.name != "postgresql":
        # Into the table, so that the rows' keys are column names ("metadata" included).
        session.execute(insert(AUDIT_TABLE), [without_nul(row) for row in rows])
        return
    # Through the driver, in the session's transaction: a COPY costs about a third of
    # the client CPU of an executemany, which costs a pipelined statement (and four
    # JSON binds) per row; an INSERT of its text half of SQLAlchemy's for one row.
    session.flush()  # the rows may describe changes still pending in the session
    values = [column_values(row) for row in rows]
    driver = connection.connection.driver_connection
    statement = INSERT_AUDIT if len(rows) <= _INSERT_AT_MOST else _COPY_AUDIT
    with as_sqlalchemy_errors(connection, statement), cast(Any, driver).cursor() as cursor:
        if statement is INSERT_AUDIT:
            cursor.executemany(INSERT_AUDIT, values)
        else:
            with cursor.copy(_COPY_AUDIT) as copy:
                for each in values:
                    copy.write_row(each)


def column_values(row: dict[str, Any]) -> tuple[Any, ...]:
    """An audit row's values in `INSERT_AUDIT`'s (and `_COPY_AUDIT`'s) order, its JSON
    columns as text."""
    if row["at"].tzinfo is None:
        raise ValueError("naive datetime given to a UTC column")
    return (
        row["at"],
        without_nul(row["event_type"]),
        row["work_item_id"],
        without_nul(row["actor"]),
        json_column_text(row["old_state"]),
        json_column_text(row["new_state"]),
        json_column_text(row["trigger"]),
        json_column_text(row["metadata"]),
    )


@on_commit.handler("audit")
def log_committed(_: Session, rows: list[dict[str, Any]]) -> None:
    """Log committed audit rows and wake the archiver (rows written by any statement)."""
    announce_committed(rows)


def announce_committed(rows: list[dict[str, Any]]) -> None:
    """What follows the commit of audit rows written without a session (`row()`s of
    `AuditRecord`s): log them, wake the archiver."""
    if log.isEnabledFor(logging.INFO):
        # The lines of one commit are logged at one moment from one thread: their
        # records differ only in the entry, so each is a copy of one record made here
        # (making a record looks up the time, thread, process and file: most of a
        # line's cost). `log.info` would also look up the caller's frame per line.
        model = log.makeRecord(log.name, logging.INFO, __file__, 0, "audit %s", (), None)
        last = len(rows) - 1
        for index, row in enumerate(rows):
            entry = document(row)
            record = logging.LogRecord.__new__(logging.LogRecord)
            record.__dict__.update(model.__dict__)
            record.args = (jsontext.dumps(entry, default=str, sort_keys=True),)
            # `audit` is the structured form for `--log-format json`; `wq_more` tells
            # the daemon's handler that lines of the same commit follow (one flush for
            # all).
            record.audit = entry
            record.wq_more = index < last
            log.handle(record)
    for listener in list(_committed_listeners):
        listener()


def prune(
    session: Session, *, retention_days: int, now: datetime, keep_unarchived: bool = False
) -> int:
    """Delete audit rows older than the retention period; return how many.

    With `keep_unarchived` (S3 archival is on) rows not archived yet stay, however old:
    the row is the only copy until its object is written.
    """
    query = delete(AuditEntry).where(AuditEntry.at < now - timedelta(days=retention_days))
    if keep_unarchived:
        query = query.where(AuditEntry.archived_at.is_not(None))
    result = session.execute(query)
    if keep_unarchived:
        overdue = session.scalar(
            select(func.count())
            .select_from(AuditEntry)
            .where(
                AuditEntry.archived_at.is_(None),
                AuditEntry.at < now - timedelta(days=retention_days),
            )
        )
        if overdue:
            log.warning(
                "%d audit entries past audit.retention_days (%d) are kept: not archived yet",
                overdue,
                retention_days,
            )
    return int(result.rowcount)  # type: ignore[attr-defined]
