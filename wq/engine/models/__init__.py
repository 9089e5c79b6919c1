"""The generic tables: work items, readiness dimensions, pending events, audit log.

`base` holds the vocabulary (phases, admission states, lanes) and the column types,
`work_item` the items and their dimensions, `records` the bookkeeping beside them, and
`changes` what the flush counts as a change of an item. Importing this package maps
them all (one metadata, the flush's listeners registered).
"""

from wq.engine.models.base import (
    ACTIVE,
    ADMISSION_STATES,
    ADMITTED,
    ALERT_LANE,
    CANCELLED,
    COMPLETED,
    DONE,
    FAILED,
    IDLE,
    LANES,
    NORMAL_LANE,
    PHASES,
    QUEUED,
    TERMINAL_PHASES,
    Base,
    JsonDoc,
    UtcDateTime,
    new_stamp,
    utcnow,
)
from wq.engine.models.changes import EXECUTOR_SESSION, changes_state, history_of
from wq.engine.models.records import (
    AuditEntry,
    FailedCount,
    PendingEvent,
    Replica,
    SequenceCounter,
)
from wq.engine.models.work_item import WorkItem, WorkItemStatus

__all__ = [
    "ACTIVE",
    "ADMISSION_STATES",
    "ADMITTED",
    "ALERT_LANE",
    "CANCELLED",
    "COMPLETED",
    "DONE",
    "EXECUTOR_SESSION",
    "FAILED",
    "IDLE",
    "LANES",
    "NORMAL_LANE",
    "PHASES",
    "QUEUED",
    "TERMINAL_PHASES",
    "AuditEntry",
    "Base",
    "FailedCount",
    "JsonDoc",
    "PendingEvent",
    "Replica",
    "SequenceCounter",
    "UtcDateTime",
    "WorkItem",
    "WorkItemStatus",
    "changes_state",
    "history_of",
    "new_stamp",
    "utcnow",
]
