"""The periodic sweep: the safety net behind leases, deferrals and events.

It reclaims leases that expired (a dead worker's items run again about one lease
period after its last heartbeat), queues idle items whose deferred dimensions came
due, drains events that nobody applied (start-up recovery), prunes old audit rows and
folds the failed items' count rows (`wq.engine.failed_counts`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from wq.engine.audit import AuditRecord, audit, prune
from wq.engine.config import Config
from wq.engine.events import drain_events, items_with_pending_events
from wq.engine.failed_counts import fold
from wq.engine.items import settle
from wq.engine.metrics import metrics_of
from wq.engine.models import ACTIVE, ADMITTED, IDLE, WorkItem, WorkItemStatus, utcnow
from wq.engine.registry import TypeRegistry
from wq.engine.store import inline
from wq.engine.wakeup import ITEMS_ADMITTED, signal

log = logging.getLogger(__name__)
SWEEP = "sweep"


@dataclass
class SweepReport:
    """What one sweep did."""

    leases_reclaimed: int = 0
    deferrals_due: int = 0
    events_drained: int = 0
    audit_pruned: int = 0
    failed_counts_folded: int = 0


def sweep_once(
    sessions: sessionmaker[Session], registry: TypeRegistry, config: Config
) -> SweepReport:
    """Run every part of the sweep once."""
    report = SweepReport()
    now = utcnow()
    with sessions.begin() as session:
        # Read the owners first (RETURNING would give the new, empty ones); the rows
        # stay locked until commit, so a heartbeat cannot slip in between.
        expired = session.execute(
            select(WorkItem.id, WorkItem.lease_owner)
            # Among the admitted items: only they hold leases (and no index holds one).
            .where(WorkItem.admission == inline(ADMITTED), WorkItem.leased_until < now)
            .with_for_update(skip_locked=True)
        ).all()
        if expired:
            session.execute(
                update(WorkItem)
                .where(WorkItem.id.in_([item_id for item_id, _ in expired]))
                .values(lease_owner=None, lease_token=None, leased_until=None)
                .execution_options(synchronize_session=False)
            )
        report.leases_reclaimed = len(expired)
        if expired:
            audit(
                session,
                *(
                    AuditRecord(
                        "lease_expired",
                        SWEEP,
                        item_id,
                        old_state={"lease_owner": previous_owner},
                        trigger={"source": "sweep", "reason": "lease expired"},
                    )
                    for item_id, previous_owner in expired
                ),
            )
            signal(session, ITEMS_ADMITTED)
    if expired:
        metrics_of(sessions).lease_rescues.labels("sweep").inc(len(expired))
    with sessions.begin() as session:
        deferred = (
            select(WorkItemStatus.work_item_id)
            .where(WorkItemStatus.status == "true", WorkItemStatus.pending_until <= now)
            .scalar_subquery()
        )
        # An item another transaction holds is left for the next sweep, not waited for:
        # that would hold up every other due item, and the rest of the sweep with them.
        due = (
            session.execute(
                select(WorkItem)
                .where(
                    WorkItem.id.in_(deferred),
                    WorkItem.phase == ACTIVE,
                    WorkItem.admission == IDLE,
                    WorkItem.type.in_(registry.names),
                )
                .with_for_update(skip_locked=True, of=WorkItem)
            )
            .scalars()
            .all()
        )
        for item in due:
            settle(
                session,
                item,
                registry,
                now,
                actor=SWEEP,
                trigger={"source": "sweep", "reason": "pending_until expired"},
            )
        report.deferrals_due = len(due)
    with sessions.begin() as session:
        orphaned = items_with_pending_events(session)
    for item_id in orphaned:
        try:
            with sessions.begin() as session:
                result = drain_events(session, item_id, registry, actor=SWEEP)
                report.events_drained += result.applied + result.discarded
        except Exception:
            log.exception("applying the events of work item %s failed", item_id)
    with sessions.begin() as session:
        report.audit_pruned = prune(
            session,
            retention_days=config.audit.retention_days,
            now=now,
            keep_unarchived=config.audit.archiving,
        )
    with sessions.begin() as session:
        report.failed_counts_folded = fold(session)
    log.debug("sweep: %s", report)
    return report
