"""The `task` work-item type: agent runs of configured kinds on a local or Kubernetes runner.

A task holds its admission slot from admission until its run is terminal; it is
submitted through the API, the Grafana alert webhook, GitLab rules or schedules.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wq.engine.registry import (
    ItemType,
    Submission,
    TickContext,
    Ticker,
    TypeRegistry,
    Webhook,
)

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from wq.engine.models import WorkItem
    from wq.types.task.runners import Runner
    from wq.types.task.settings import TaskSettings


@dataclass(frozen=True)
class TaskRuntime:
    """The parsed settings and the runner instances of one registered `task` type."""

    settings: TaskSettings
    runners: dict[str, Runner]


def build_runners(settings: TaskSettings) -> dict[str, Runner]:
    """One instance of every configured runner."""
    from wq.engine.config import data_dir
    from wq.types.task.runners.command import CommandRunner

    command = settings.runners.command
    runs_dir = Path(command.runs_dir) if command.runs_dir else data_dir() / "task-runs"
    runners: dict[str, Runner] = {
        "command": CommandRunner(command, runs_dir, settings.log_tail_bytes)
    }
    if settings.runners.kubernetes is not None:
        from wq.types.task.runners.kubernetes import KubernetesRunner

        runners["kubernetes"] = KubernetesRunner(
            settings.runners.kubernetes, settings.log_tail_bytes
        )
    return runners


def request_cancel(session: Session, item: WorkItem, now: datetime) -> bool:
    """An admitted task stops its run first: its worker then ends it `cancelled`."""
    from wq.types.task.models import TaskItem

    assert isinstance(item, TaskItem)
    item.cancel_requested = True
    return True


def register(
    registry: TypeRegistry,
    settings: dict[str, Any],
    *,
    source: str = "",
    runners: dict[str, Runner] | None = None,
) -> None:
    """Register the `task` type with its settings from `handled_types.task`."""
    from wq.types.task.decider import decide
    from wq.types.task.executors import make_executors
    from wq.types.task.gc import collect
    from wq.types.task.gitlab_rules import RESOLVED_KINDS, make_resolver
    from wq.types.task.gitlab_rules import handle as handle_event
    from wq.types.task.models import TYPE_NAME, TaskItem
    from wq.types.task.output import make_output
    from wq.types.task.schemas import submission_schema
    from wq.types.task.settings import parse_settings
    from wq.types.task.submit import submit_from_api

    parsed = parse_settings(settings, source=source)
    runners = runners if runners is not None else build_runners(parsed)
    ttl = timedelta(seconds=parsed.gc_after_seconds)

    def garbage_collect(tick: TickContext) -> None:
        collect(tick.sessions, runners, ttl=ttl, now=tick.now)

    tickers = [Ticker("task-gc", parsed.gc_interval_seconds, garbage_collect)]
    if parsed.schedules:
        from wq.types.task.schedules import produce

        def run_schedules(tick: TickContext) -> None:
            produce(tick, parsed)

        tickers.append(Ticker("task-schedules", parsed.schedule_interval_seconds, run_schedules))
    webhooks = []
    if parsed.grafana is not None:
        import os

        from wq.types.task import grafana

        secret_env = parsed.grafana.secret_env
        webhooks.append(
            Webhook(
                name="grafana",
                handle=lambda session, document, ctx: grafana.handle(
                    session, document, ctx, parsed
                ),
                shared_secret=os.environ.get(secret_env) if secret_env else None,
                schema=grafana.GrafanaNotification,
            )
        )
    registry.register_type(
        ItemType(
            name=TYPE_NAME,
            model=TaskItem,
            decider=decide,
            executors=make_executors(parsed, runners),
            submission=Submission(
                schema=submission_schema(
                    {name: kind.scope for name, kind in parsed.kinds.items()},
                    {
                        name: kind.payload_schema
                        for name, kind in parsed.kinds.items()
                        if kind.payload_schema is not None
                    },
                ),
                project_of=lambda payload: payload.project,
                handle=lambda session, payload, ctx: submit_from_api(session, payload, ctx, parsed),
            ),
            cancel_requested=request_cancel,
            event_resolver=make_resolver(parsed, registry) if parsed.issue_rules else None,
            event_kinds=RESOLVED_KINDS,
            event_handler=handle_event if parsed.issue_rules else None,
            tickers=tuple(tickers),
            webhooks=tuple(webhooks),
            settings=TaskRuntime(parsed, runners),
            output=make_output(runners),
        )
    )
