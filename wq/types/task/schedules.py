"""Cron schedules producing autonomous tasks, once per tick across any number of replicas.

Every replica looks at every schedule each `schedule_interval_seconds`. The latest
tick that is due (and not older than a catch-up window) is claimed by inserting its
(schedule, tick) row: the primary key lets exactly one replica win, in the same
transaction as the task it produces. A tick whose project already has
`queued_autonomous_cap` autonomous tasks waiting is skipped for good and counted.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from croniter import croniter
from sqlalchemy.exc import IntegrityError

from wq.engine.metrics import declare_counter
from wq.engine.registry import TickContext
from wq.types.task.models import TaskScheduleTick
from wq.types.task.schemas import TaskCreate
from wq.types.task.settings import ScheduleConfig, TaskSettings
from wq.types.task.submit import submit_task

log = logging.getLogger(__name__)
TICKS = declare_counter(
    "task_schedule_ticks_total",
    "Schedule ticks by outcome: created, capped (skipped at the autonomous cap), dedup.",
    ["project", "kind", "outcome"],
)


@dataclass(frozen=True)
class Produced:
    """What happened to one tick this replica claimed."""

    schedule: str
    tick: datetime
    outcome: str


def schedule_key(schedule: ScheduleConfig) -> str:
    """The stable name of a schedule: project, kind, repository and cron expression."""
    return "|".join((schedule.project, schedule.kind, schedule.repository or "", schedule.cron))


def latest_tick(cron: str, now: datetime) -> datetime:
    """The latest tick at or before `now`."""
    # get_prev is strictly before its base: a second later includes `now` itself.
    previous: datetime = croniter(cron, now.replace(microsecond=0) + timedelta(seconds=1)).get_prev(
        datetime
    )
    return previous


def produce(tick: TickContext, settings: TaskSettings) -> list[Produced]:
    """Claim and produce the due tick of every schedule; return what this replica made."""
    window = timedelta(seconds=max(60.0, 2 * settings.schedule_interval_seconds))
    produced: list[Produced] = []
    for schedule in settings.schedules:
        due = latest_tick(schedule.cron, tick.now)
        if due < tick.now - window:
            continue  # missed while no daemon ran: not made up later
        key = schedule_key(schedule)
        try:
            with tick.sessions.begin() as session:
                row = TaskScheduleTick(
                    schedule=key, tick=due, outcome="claimed", created_at=tick.now
                )
                session.add(row)
                session.flush()  # the unique (schedule, tick) claim; the loser stops here
                result = submit_task(
                    session,
                    TaskCreate(
                        project=schedule.project,
                        kind=schedule.kind,
                        repository=schedule.repository,
                        payload={**schedule.payload, "source": "schedule", "tick": due.isoformat()},
                        autonomous=True,
                    ),
                    settings=settings,
                    registry=tick.registry,
                    pool=tick.config.pool_for(schedule.project),
                    now=tick.now,
                    actor="schedule",
                    trigger={"source": "schedule", "cron": schedule.cron, "tick": due.isoformat()},
                )
                row.outcome = result.outcome
        except IntegrityError:
            continue  # another replica produced this tick
        except Exception as err:
            # One schedule whose task cannot be made (refused, or the database failing
            # on it) does not hold back the others; it is tried again next interval.
            log.warning("schedule %s: tick %s not produced: %s", key, due, err)
            continue
        TICKS.of(tick.sessions).labels(
            project=schedule.project, kind=schedule.kind, outcome=result.outcome
        ).inc()
        if result.outcome == "capped":
            log.info("schedule %s: tick %s skipped, the autonomous cap is reached", key, due)
        produced.append(Produced(key, due, result.outcome))
    return produced
