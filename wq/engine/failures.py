"""A failed action: back off, go back to the queue, or fail the item.

Transient failures (`RetryLater`, anything unexpected) are counted and the item waits
out a backoff that doubles per attempt, keeping its slot, until `max_attempts` (or for
as long as it takes, for a `RetryLater` that keeps trying); a `PermanentFailure` fails
it at once. An action that could not even begin (`Requeue`)
gives its slot back and waits in the queue at its old place. Workers and batches both
record failures here, under the item's lease fence.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from sqlalchemy.orm import Session

from wq.engine.audit import AuditRecord, audit
from wq.engine.config import ProcessingConfig
from wq.engine.items import set_phase
from wq.engine.models import FAILED, QUEUED, WorkItem
from wq.engine.models.base import storable_text
from wq.engine.registry import PermanentFailure, Requeue, RetryLater
from wq.engine.releases import snapshot
from wq.engine.wakeup import PROJECT_QUEUED, signal, signal_later

# The most of a failure an item's `error` holds.
ERROR_CHARS = 4000
log = logging.getLogger("wq.engine.processing")


def backoff_delay(attempts: int, base: float, maximum: float) -> float:
    """Seconds to wait before retrying after the given number of failed attempts."""
    # The exponent is bounded: an item that keeps trying through a week-long outage
    # counts a thousand attempts, and 2.0 ** 1024 is more than a float holds.
    return float(min(maximum, base * 2.0 ** min(max(0, attempts - 1), 64)))


# How long after a requeued item's run_after its project's admission pass comes.
DUE_MARGIN_SECONDS = 0.05


def record_failure(
    session: Session,
    item: WorkItem,
    action: str,
    err: Exception,
    actor: str,
    settings: ProcessingConfig,
    now: datetime,
) -> None:
    """Count a failed action: back off (or requeue, or fail the item), let go of the lease.

    The caller holds the item's lease fence in the open transaction.
    """
    known = isinstance(err, RetryLater | PermanentFailure | Requeue)
    message = f"{action}: {err}" if known else f"{action}: {type(err).__name__}: {err}"
    message = message[:ERROR_CHARS]
    # As the column stores it, for the log line and the audit row alike.
    message = storable_text(message)
    log.warning("work item %s: %s", item.id, message)
    old = {**snapshot(item), "attempts": item.attempts}
    if not (item.error or "").startswith(f"{action}: "):
        item.attempts = 0  # another action failed before: a new run of failures
    item.attempts += 1
    item.error = message
    trigger = {"source": "worker", "action": action, "error": message}
    requeue = isinstance(err, Requeue)
    gives_up = not (isinstance(err, RetryLater) and err.keep_trying)
    if not requeue and (
        isinstance(err, PermanentFailure) or (gives_up and item.attempts >= settings.max_attempts)
    ):
        reason = (
            "permanent failure" if isinstance(err, PermanentFailure) else "max attempts reached"
        )
        set_phase(session, item, FAILED, actor=actor, trigger={**trigger, "reason": reason})
        return
    delay = backoff_delay(
        item.attempts, settings.backoff_base_seconds, settings.backoff_max_seconds
    )
    if isinstance(err, RetryLater | Requeue) and err.retry_after:
        # What a server asks for, up to the longest backoff: a Retry-After of years (or
        # of `inf`) would hold the item's slot that long.
        delay = max(delay, min(err.retry_after, settings.backoff_max_seconds))
    item.run_after = now + timedelta(seconds=delay)
    item.lease_owner = item.lease_token = None
    item.leased_until = None
    if requeue:
        # Back in line at its old place (same seq); its slot is free meanwhile,
        # and the dispatcher admits it again once run_after has passed: this process
        # passes over its project then (a little after, to be sure it has passed).
        item.admission = QUEUED
        signal(session, PROJECT_QUEUED, item.project)
        signal_later(session, PROJECT_QUEUED, item.project, delay + DUE_MARGIN_SECONDS)
    audit(
        session,
        AuditRecord(
            "requeued" if requeue else "action_failed",
            actor,
            item.id,
            old_state=old,
            new_state={**snapshot(item), "attempts": item.attempts},
            trigger={**trigger, "retry_in_seconds": delay},
        ),
    )
