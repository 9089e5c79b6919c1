"""The `task_details` table (one agent run of a configured kind) and schedule ticks."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import Boolean, ForeignKey, Integer, String, Uuid
from sqlalchemy.orm import Mapped, mapped_column

from wq.engine.models import Base, JsonDoc, UtcDateTime, WorkItem, utcnow
from wq.engine.models.base import OutsideText

# The type's name: in `work_items.type`, the API's paths and the config.
TYPE_NAME = "task"


class TaskItem(WorkItem):
    """A task work item (joined-table inheritance on `work_items`).

    `run_id` names the current run at its runner; it is derived from the item id and
    `run_generation`, so a worker that lost its lease after starting a run and the
    next owner agree on the name, and the next owner re-attaches instead of starting
    a second run.
    """

    __tablename__ = "task_details"

    id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("work_items.id", ondelete="CASCADE"), primary_key=True
    )
    kind: Mapped[str] = mapped_column(String(128))
    repository: Mapped[str | None] = mapped_column(String(512))
    payload: Mapped[dict[str, Any]] = mapped_column(JsonDoc)
    runner: Mapped[str] = mapped_column(String(64))
    run_id: Mapped[str | None] = mapped_column(String(255))
    run_generation: Mapped[int] = mapped_column(Integer, default=0)
    # The worker that started the current run (`host:pid/worker-N`): the `command`
    # runner's output is on that machine.
    started_by: Mapped[str | None] = mapped_column(String(255))
    started_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    deadline_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    next_check_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    exit_status: Mapped[int | None] = mapped_column(Integer)
    log_tail: Mapped[str | None] = mapped_column(OutsideText)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)

    api_details_columns = (
        "kind",
        "repository",
        "payload",
        "runner",
        "run_id",
        "run_generation",
        "started_by",
        "started_at",
        "finished_at",
        "exit_status",
        "log_tail",
        "cancel_requested",
    )

    scheduling_columns = ("next_check_at",)

    __mapper_args__ = {  # noqa: RUF012 (SQLAlchemy's declared attribute)
        "polymorphic_identity": TYPE_NAME,
        "polymorphic_load": "selectin",
    }

    @property
    def running(self) -> bool:
        """A run was started and has not been seen to end."""
        return self.run_id is not None and self.finished_at is None

    @classmethod
    def details_of(cls, source: Any) -> dict[str, Any]:
        """The `details` the API shows (from an item or a row of `api_details_columns`)."""
        started, finished = source.started_at, source.finished_at
        return {
            "kind": source.kind,
            "repository": source.repository,
            "payload": source.payload,
            "runner": source.runner,
            "run_id": source.run_id,
            # Runs started so far: `attempts` counts failures in a row of one action, and
            # a run that ended badly fails the task without one.
            "runs": source.run_generation,
            "started_by": source.started_by,
            "started_at": started.isoformat() if started else None,
            "finished_at": finished.isoformat() if finished else None,
            "exit_status": source.exit_status,
            "log_tail": source.log_tail,
            "cancel_requested": source.cancel_requested,
        }


class TaskScheduleTick(Base):
    """One produced tick of one schedule: the primary key makes it once per cluster."""

    __tablename__ = "task_schedule_ticks"

    schedule: Mapped[str] = mapped_column(String(1024), primary_key=True)
    tick: Mapped[datetime] = mapped_column(UtcDateTime, primary_key=True)
    outcome: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow, index=True)
