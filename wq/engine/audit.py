"""The audit trail: one row per audited state change, logged at INFO once committed.

Field conventions follow the work-queue-service spec: `actor` is the caller identity,
the worker thread name or "system"/"dispatcher"; `old_state`/`new_state` hold only
the keys that changed meaning (None values dropped); `trigger` always has `source`.
"""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import Table, delete, insert
from sqlalchemy.orm import Session

from wq.engine import on_commit
from wq.engine.models import AuditEntry, utcnow

log = logging.getLogger("wq.audit")
AUDIT_TABLE: Table = cast(Table, AuditEntry.__table__)


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
    if state is None:
        return None
    return {key: value for key, value in state.items() if value is not None}


def audit(session: Session, *records: AuditRecord) -> None:
    """Record audit rows: written in one statement when the transaction commits."""
    for record in records:
        on_commit.defer(session, "audit", record.row())


@on_commit.before("audit")
def _write(session: Session, rows: list[dict[str, Any]]) -> None:
    # Into the table, so that the rows' keys are column names ("metadata" included).
    session.execute(insert(AUDIT_TABLE), rows)


@on_commit.handler("audit")
def _log_committed(_: Session, rows: list[dict[str, Any]]) -> None:
    if log.isEnabledFor(logging.INFO):
        for row in rows:
            log.info("audit %s", json.dumps(row, default=str, sort_keys=True))


def prune(session: Session, *, retention_days: int, now: datetime) -> int:
    """Delete audit rows older than the retention period; return how many."""
    result = session.execute(
        delete(AuditEntry).where(AuditEntry.at < now - timedelta(days=retention_days))
    )
    return int(result.rowcount)  # type: ignore[attr-defined]
