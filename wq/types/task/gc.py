"""Garbage collection of finished tasks after a TTL (the audit log keeps their history).

Runs on every replica; deleting the same rows twice is harmless. A task's run is
removed at its runner (run directory, Job) before its rows go.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from datetime import datetime, timedelta

from sqlalchemy import Table, delete, select
from sqlalchemy.orm import Session, sessionmaker

from wq.engine.audit import AuditRecord, audit
from wq.engine.models import TERMINAL_PHASES, WorkItem
from wq.types.task.models import TYPE_NAME, TaskItem, TaskScheduleTick
from wq.types.task.runners import Runner, run_id_for

log = logging.getLogger(__name__)
BATCH = 500
TICK_RETENTION = timedelta(days=7)


def collect(
    sessions: sessionmaker[Session],
    runners: Mapping[str, Runner],
    *,
    ttl: timedelta,
    now: datetime,
) -> int:
    """Delete up to one batch of tasks finished more than `ttl` ago; return how many."""
    cutoff = now - ttl
    old = (
        WorkItem.type == TYPE_NAME,
        WorkItem.phase.in_(sorted(TERMINAL_PHASES)),
        WorkItem.updated_at < cutoff,
    )
    with sessions() as session:
        rows = session.execute(
            select(TaskItem.id, TaskItem.runner, TaskItem.run_generation).where(*old).limit(BATCH)
        ).all()
    if not rows:
        return 0
    for item_id, runner_name, generation in rows:
        runner = runners.get(runner_name)
        if runner is None:
            continue
        # Every run the task had (a retry starts the next generation), and the one after
        # the last recorded: a start whose worker lost its lease before recording it.
        for run_id in (run_id_for(item_id, number) for number in range(1, generation + 2)):
            try:
                runner.remove(run_id)
            except Exception:  # the rows go anyway; the runner's own TTL is the backstop
                log.exception("removing run %s failed", run_id)
    ids: list[uuid.UUID] = [row[0] for row in rows]
    items: Table = WorkItem.__table__  # type: ignore[assignment]  # a Table, typed FromClause
    with sessions.begin() as session:
        deleted = list(
            session.execute(
                delete(items).where(items.c.id.in_(ids)).where(*old).returning(items.c.id)
            ).scalars()
        )
        if deleted:
            audit(
                session,
                *(
                    AuditRecord(
                        "garbage_collected",
                        "task-gc",
                        item_id,
                        trigger={"source": "gc", "ttl_seconds": ttl.total_seconds()},
                    )
                    for item_id in deleted
                ),
            )
        session.execute(
            delete(TaskScheduleTick).where(TaskScheduleTick.created_at < now - TICK_RETENTION)
        )
    return len(deleted)
