"""Grafana alerting webhook → `incident` tasks in the alert lane.

One notification is one alert group. A firing group becomes one incident task for
the project named by the configured label (or the default project), with the dedup
key SHA-256(groupKey): a repeated notification while the incident is active is a
dedup hit, and one within `cooldown_seconds` after it ended is skipped. Resolved
notifications are counted and ignored.
"""

from __future__ import annotations

import hashlib
from datetime import timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from wq.engine.config import validation_reason
from wq.engine.metrics import declare_counter
from wq.engine.models import TERMINAL_PHASES, WorkItem
from wq.engine.registry import BadWebhookPayload, WebhookContext
from wq.types.task.models import TYPE_NAME
from wq.types.task.schemas import TaskCreate
from wq.types.task.settings import GrafanaConfig, TaskSettings
from wq.types.task.submit import submit_task

ALERTS = declare_counter(
    "grafana_notifications_total",
    "Grafana alert notifications by outcome: created, dedup, cooldown, resolved.",
    ["outcome"],
)


class GrafanaAlert(BaseModel):  # field names are Grafana's own
    """One alert of a notification (the fields wq uses; others are kept out)."""

    model_config = ConfigDict(extra="ignore")

    status: str = ""
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    startsAt: str | None = None
    fingerprint: str | None = None
    generatorURL: str | None = None


class GrafanaNotification(BaseModel):
    """Grafana's webhook body for one alert group."""

    model_config = ConfigDict(extra="ignore")

    status: str = Field(pattern="^(firing|resolved)$")
    groupKey: str = Field(min_length=1, max_length=4096)
    alerts: list[GrafanaAlert]
    groupLabels: dict[str, str] = Field(default_factory=dict)
    commonLabels: dict[str, str] = Field(default_factory=dict)
    commonAnnotations: dict[str, str] = Field(default_factory=dict)
    externalURL: str | None = None
    title: str | None = None
    message: str | None = None


def dedup_key(group_key: str) -> str:
    """The dedup key of an alert group."""
    return hashlib.sha256(group_key.encode()).hexdigest()


def _project(notification: GrafanaNotification, config: GrafanaConfig) -> str:
    label = config.project_label
    for labels in (
        notification.commonLabels,
        notification.groupLabels,
        *(alert.labels for alert in notification.alerts),
    ):
        if labels.get(label):
            return labels[label]
    if config.default_project:
        return config.default_project
    raise BadWebhookPayload(
        f"no {label!r} label names the project, and grafana.default_project is not set"
    )


def _parse(document: Any) -> GrafanaNotification:
    try:
        return GrafanaNotification.model_validate(document)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "body"
        raise BadWebhookPayload(
            f"not a Grafana notification: {where}: {validation_reason(first)}"
        ) from None


def _in_cooldown(
    session: Session, project: str, key: str, ctx: WebhookContext, seconds: float
) -> bool:
    """Whether the project's incident of this group ended within the cooldown."""
    if seconds <= 0:
        return False
    since = ctx.now - timedelta(seconds=seconds)
    recent = session.execute(
        select(WorkItem.id)
        .where(
            WorkItem.type == TYPE_NAME,
            WorkItem.project == project,
            WorkItem.dedup_key == key,
            WorkItem.phase.in_(sorted(TERMINAL_PHASES)),
            WorkItem.updated_at >= since,
        )
        .limit(1)
    ).first()
    return recent is not None


def _task(**fields: Any) -> TaskCreate:
    """The incident task; a label no task can hold (too long, NUL) is the sender's error."""
    try:
        return TaskCreate(**fields)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or TYPE_NAME
        raise BadWebhookPayload(
            f"the notification gives no usable task: {where}: {validation_reason(first)}"
        ) from None


def handle(
    session: Session, document: Any, ctx: WebhookContext, settings: TaskSettings
) -> tuple[int, dict[str, Any]]:
    """Turn one notification into at most one incident task."""
    config = settings.grafana
    assert config is not None
    notification = _parse(document)
    if notification.status == "resolved":
        ALERTS.of(session).labels(outcome="resolved").inc()
        return 200, {"outcome": "ignored", "reason": "resolved notifications are not acted on"}
    project = _project(notification, config)
    key = dedup_key(notification.groupKey)
    if _in_cooldown(session, project, key, ctx, config.cooldown_seconds):
        ALERTS.of(session).labels(outcome="cooldown").inc()
        return 200, {"outcome": "cooldown", "project": project}
    payload = _task(
        project=project,
        kind=config.kind,
        lane="alert",
        dedup_key=key,
        payload={
            "source": "grafana",
            "goal": notification.title or notification.commonLabels.get("alertname", "alert"),
            "group_key": notification.groupKey,
            "message": notification.message,
            "external_url": notification.externalURL,
            "labels": notification.commonLabels,
            "annotations": notification.commonAnnotations,
            "alerts": [alert.model_dump(exclude_none=True) for alert in notification.alerts],
        },
    )
    # Kept and listed as any task's payload: held to what the task API would take.
    ctx.check_document("payload", payload.payload)
    result = submit_task(
        session,
        payload,
        settings=settings,
        registry=ctx.registry,
        pool=ctx.pool_for(project),
        now=ctx.now,
        actor=ctx.actor,
        trigger={"source": "grafana", "group_key": notification.groupKey},
    )
    ALERTS.of(session).labels(outcome=result.outcome).inc()
    assert result.item is not None  # alerts are never autonomous, so never capped
    body = {"outcome": result.outcome, "project": project, "id": str(result.item.id)}
    return (201 if result.outcome == "created" else 200), body
