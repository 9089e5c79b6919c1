"""GitLab events for MR items: which items an event concerns, and what it changes.

- merge_request: merge → completed, close → cancelled; approved, unapproved, update
  and reopen → `needs_reconcile`.
- pipeline: success or failure → `needs_reconcile`, and `head_pipeline_id` follows.
- build (job): a failed job joins the `needs_ci_retry` jobs list (one entry per build id,
  deferral cleared) for the CI-retry executor.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from wq.engine.audit import AuditRecord, audit
from wq.engine.dimensions import set_dimension
from wq.engine.items import set_phase
from wq.engine.models import ACTIVE, CANCELLED, COMPLETED
from wq.engine.registry import EventContext
from wq.types.mr.models import MrItem

SYSTEM = "system"
RECONCILE_ACTIONS = frozenset(
    {"approved", "unapproved", "approval", "unapproval", "update", "reopen"}
)
PHASE_ACTIONS = {"merge": COMPLETED, "close": CANCELLED}
JOB_FIELDS = (
    "build_id",
    "build_name",
    "build_failure_reason",
    "build_finished_at",
    "retries_count",
    "pipeline_id",
)


def parse_time(value: Any) -> datetime | None:
    """GitLab's timestamps: ISO 8601, or `2024-05-01 12:00:00 UTC`."""
    if not isinstance(value, str) or not value:
        return None
    text = value.replace(" UTC", "+00:00").replace("Z", "+00:00")
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _text(value: Any) -> str | None:
    """A string the database can hold, or None."""
    return value if isinstance(value, str) and "\x00" not in value else None


def _iid(value: Any) -> int | None:
    """A merge request iid that fits the column, or None."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 2**31:
        return value
    return None


def _project_path(payload: dict[str, Any]) -> str | None:
    project = payload.get("project")
    return _text(project.get("path_with_namespace")) if isinstance(project, dict) else None


def _attributes(payload: dict[str, Any]) -> dict[str, Any]:
    attributes = payload.get("object_attributes")
    return attributes if isinstance(attributes, dict) else {}


def resolve(session: Session, kind: str, payload: Any) -> tuple[list[uuid.UUID], datetime | None]:
    """The MR items an event concerns, and the event's time for the order guard."""
    if not isinstance(payload, dict):
        return [], None
    project = _project_path(payload)
    attributes = _attributes(payload)
    if project is None:
        return [], None
    query = select(MrItem.id).where(MrItem.project == project)
    if kind == "merge_request":
        iid, branch = _iid(attributes.get("iid")), _text(attributes.get("source_branch"))
        query = query.where(
            or_(
                MrItem.mr_iid == iid,
                (MrItem.mr_iid.is_(None))
                & (MrItem.source_branch == branch)
                & (MrItem.phase == ACTIVE),
            )
        )
        event_at = parse_time(attributes.get("updated_at"))
    elif kind == "pipeline":
        query = query.where(
            MrItem.source_branch == _text(attributes.get("ref")), MrItem.phase == ACTIVE
        )
        event_at = parse_time(attributes.get("finished_at") or attributes.get("created_at"))
    elif kind == "build":
        query = query.where(
            MrItem.source_branch == _text(payload.get("ref")), MrItem.phase == ACTIVE
        )
        event_at = parse_time(
            payload.get("build_finished_at")
            or payload.get("build_started_at")
            or payload.get("build_created_at")
        )
    else:
        return [], None
    return list(session.execute(query).scalars()), event_at


def _trigger(kind: str, payload: dict[str, Any], **extra: Any) -> dict[str, Any]:
    attributes = _attributes(payload)
    event_id = attributes.get("id") or payload.get("build_id")
    return {"source": "event", "event": kind, "event_id": event_id, **extra}


def _needs(ctx: EventContext, dimension: str, trigger: dict[str, Any], **fields: Any) -> None:
    set_dimension(ctx.session, ctx.item, dimension, True, **fields)
    audit(
        ctx.session,
        AuditRecord(
            "dimension_set",
            SYSTEM,
            ctx.item.id,
            new_state={"dimension": dimension, "status": "true"},
            trigger=trigger,
        ),
    )


def handle(ctx: EventContext) -> None:
    """Apply one GitLab event to one MR item."""
    item = cast(MrItem, ctx.item)
    payload = ctx.payload if isinstance(ctx.payload, dict) else {}
    attributes = _attributes(payload)
    if ctx.event_type == "merge_request":
        action = attributes.get("action")
        trigger = _trigger(ctx.event_type, payload, action=action)
        if action in PHASE_ACTIONS:
            set_phase(ctx.session, item, PHASE_ACTIONS[action], actor=SYSTEM, trigger=trigger)
        elif action in RECONCILE_ACTIONS:
            _needs(ctx, "needs_reconcile", trigger)
    elif ctx.event_type == "pipeline":
        status = attributes.get("status")
        if status in ("success", "failed"):
            pipeline_id = attributes.get("id")
            if (
                isinstance(pipeline_id, int)
                and not isinstance(pipeline_id, bool)
                and (0 < pipeline_id < 2**63)
            ):
                item.head_pipeline_id = pipeline_id
            _needs(ctx, "needs_reconcile", _trigger(ctx.event_type, payload, status=status))
    elif ctx.event_type == "build" and payload.get("build_status") == "failed":
        row = item.status("needs_ci_retry")
        jobs = list((row.detail or {}).get("jobs", [])) if row is not None else []
        if all(job.get("build_id") != payload.get("build_id") for job in jobs):
            job = {name: payload.get(name) for name in JOB_FIELDS}
            pipeline = payload.get("pipeline")
            if job["pipeline_id"] is None and isinstance(pipeline, dict):
                job["pipeline_id"] = pipeline.get("id")
            jobs.append(job)
        _needs(
            ctx,
            "needs_ci_retry",
            _trigger(ctx.event_type, payload),
            detail={"jobs": jobs},
            pending_until=None,
        )
