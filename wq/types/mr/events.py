"""GitLab events for MR items: which items an event concerns, and what it changes.

- merge_request: merge → completed, close → cancelled; approved, unapproved, update
  and reopen → `needs_reconcile`.
- pipeline: success or failure → `needs_reconcile`; a newer pipeline becomes the head.
- build (job): its pipeline becomes the head when newer; a failed job joins the
  `needs_ci_retry` jobs list (one entry per build id, deferral cleared).

Resolution is exact: by (project, iid) once an item knows its MR, otherwise by (project,
source branch) only when the event names that branch. Pipelines and jobs of merge
request pipelines (`refs/merge-requests/<iid>/head`, `/merge`, `/train`) resolve by the
iid in their ref. An event with a missing or malformed iid, project or ref matches
nothing.

Each stream has its own clock: MR state the MR's `updated_at` (the engine's guard on
`last_event_at`), pipelines their id (ids only grow), jobs their build id (recorded
once). A job failure is dropped only when it belongs to a pipeline older than the head.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy import bindparam, select, union_all
from sqlalchemy.orm import aliased

from wq.engine.audit import AuditRecord, audit
from wq.engine.dimensions import set_dimension
from wq.engine.events import StaleEvent
from wq.engine.items import set_phase
from wq.engine.models import ACTIVE, CANCELLED, COMPLETED
from wq.engine.registry import NO_ITEMS, EventContext, EventLookup, query_resolver
from wq.types.mr.models import MrItem

SYSTEM = "system"
RECONCILE_ACTIONS = frozenset(
    {"approved", "unapproved", "approval", "unapproval", "update", "reopen"}
)
PHASE_ACTIONS = {"merge": COMPLETED, "close": CANCELLED}
# The engine orders these by `last_event_at`; pipelines and jobs are ordered here.
ORDERED_EVENTS = frozenset({"merge_request"})
JOB_FIELDS = (
    "build_id",
    "build_name",
    "build_failure_reason",
    "build_finished_at",
    "retries_count",
    "pipeline_id",
)
# A bound on the recorded jobs of one item (the oldest builds go first).
MAX_RECORDED_JOBS = 200
# A bound on the failed build ids an item remembers (the `seen` list of the
# `needs_ci_retry` detail), so that a redelivered build event is a no-op even after
# the retry executor emptied the jobs list. Build ids only grow: the oldest go first.
MAX_SEEN_BUILDS = 1000
MR_REF = re.compile(r"refs/merge-requests/([1-9][0-9]{0,9})/(?:head|merge|train)")
MAX_INT32 = 2**31 - 1
MAX_INT64 = 2**63 - 1


def parse_time(value: Any) -> datetime | None:
    """GitLab's timestamps: ISO 8601, `2024-05-01 12:00:00 UTC` or `... +0200`; None for
    anything else, and for a time outside the years 1 to 9999 in UTC."""
    if not isinstance(value, str) or not value or len(value) > 64:
        return None
    text = value.replace(" UTC", "+00:00").replace("Z", "+00:00")
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        try:
            parsed = datetime.strptime(value, "%Y-%m-%d %H:%M:%S %z")
        except ValueError:
            return None
    if parsed.tzinfo is None:
        return parsed.replace(tzinfo=UTC)
    try:
        # In UTC, as it is stored: year 1 at +14:00 is year 0 there, which no database
        # column holds (PostgreSQL stores it, then it cannot be read back).
        return parsed.astimezone(UTC)
    except OverflowError:
        return None


def _text(value: Any, limit: int = 255) -> str | None:
    """A non-empty string the database can hold, or None."""
    if isinstance(value, str) and value and len(value) <= limit and "\x00" not in value:
        return value
    return None


def _number(value: Any, maximum: int) -> int | None:
    """A positive JSON integer up to `maximum` (never a bool, a float or a string)."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= maximum:
        return value
    return None


def _iid(value: Any) -> int | None:
    """A merge request iid that fits the column, or None."""
    return _number(value, MAX_INT32)


def _project_path(payload: dict[str, Any]) -> str | None:
    project = payload.get("project")
    if not isinstance(project, dict):
        return None
    return _text(project.get("path_with_namespace"), limit=512)


def _attributes(payload: dict[str, Any]) -> dict[str, Any]:
    attributes = payload.get("object_attributes")
    return attributes if isinstance(attributes, dict) else {}


# The resolver's statements, built once: the active items of a project by MR, or by
# branch. An MR event names its MR: its active item; else, while no item at all knows
# that MR (one that does belongs to a finished item), the active item on the event's
# branch that does not know its MR yet.
_ACTIVE = select(MrItem.id).where(MrItem.project == bindparam("project"), MrItem.phase == ACTIVE)
_KNOWN = aliased(MrItem, flat=True)
_BY_MR = union_all(
    _ACTIVE.where(MrItem.mr_iid == bindparam("iid")),
    _ACTIVE.where(
        MrItem.mr_iid.is_(None),
        MrItem.source_branch == bindparam("branch"),
        ~select(_KNOWN.id)
        .where(_KNOWN.project == bindparam("project"), _KNOWN.mr_iid == bindparam("iid"))
        .exists(),
    ),
)
_BY_BRANCH = _ACTIVE.where(MrItem.source_branch == bindparam("branch"))


def _by_mr(project: str, iid: int, branch: str | None, event_at: datetime | None) -> EventLookup:
    """The active item of MR `iid`; else, while no item knows that MR, the one on `branch`."""
    return EventLookup(_BY_MR, {"project": project, "iid": iid, "branch": branch}, event_at)


def _by_ref(project: str, ref: Any, event_at: datetime | None) -> EventLookup:
    """The active items a pipeline or job ref names: an MR ref by iid, a branch by name."""
    branch = _text(ref)
    if branch is None:
        return NO_ITEMS
    matched = MR_REF.fullmatch(branch)
    if matched is not None:
        iid = _iid(int(matched.group(1)))
        return NO_ITEMS if iid is None else _by_mr(project, iid, None, event_at)
    return EventLookup(_BY_BRANCH, {"project": project, "branch": branch}, event_at)


def lookup(kind: str, payload: Any) -> EventLookup:
    """How to find the MR items an event concerns, and the event's own time (its
    stream's clock)."""
    if not isinstance(payload, dict):
        return NO_ITEMS
    project = _project_path(payload)
    if project is None:
        return NO_ITEMS
    attributes = _attributes(payload)
    if kind == "merge_request":
        iid = _iid(attributes.get("iid"))
        if iid is None:
            return NO_ITEMS
        branch = _text(attributes.get("source_branch"))
        return _by_mr(project, iid, branch, parse_time(attributes.get("updated_at")))
    if kind == "pipeline":
        if attributes.get("tag") is True:
            return NO_ITEMS
        event_at = parse_time(attributes.get("finished_at") or attributes.get("created_at"))
        merge_request = payload.get("merge_request")
        if isinstance(merge_request, dict):  # a merge request pipeline names its MR
            iid = _iid(merge_request.get("iid"))
            if iid is None:
                return NO_ITEMS
            return _by_mr(project, iid, _text(merge_request.get("source_branch")), event_at)
        return _by_ref(project, attributes.get("ref"), event_at)
    if kind == "build":
        if payload.get("tag") is True:
            return NO_ITEMS
        event_at = parse_time(
            payload.get("build_finished_at")
            or payload.get("build_started_at")
            or payload.get("build_created_at")
        )
        return _by_ref(project, payload.get("ref"), event_at)
    return NO_ITEMS


resolve = query_resolver(lookup)


def _trigger(kind: str, payload: dict[str, Any], **extra: Any) -> dict[str, Any]:
    attributes = _attributes(payload)
    event_id = _number(attributes.get("id"), MAX_INT64) or _number(
        payload.get("build_id"), MAX_INT64
    )
    return {"source": "event", "event": kind, "event_id": event_id, **extra}


def _needs(ctx: EventContext, dimension: str, trigger: dict[str, Any], **fields: Any) -> None:
    row = ctx.item.status(dimension)
    before = row.status if row is not None else None  # read now: the row is updated in place
    set_dimension(ctx.session, ctx.item, dimension, True, **fields)
    audit(
        ctx.session,
        AuditRecord(
            "dimension_set",
            SYSTEM,
            ctx.item.id,
            # No old state when the dimension did not exist yet (as on creation).
            old_state={"dimension": dimension, "status": before} if before else None,
            new_state={"dimension": dimension, "status": "true"},
            trigger=trigger,
        ),
    )


def _scalar(value: Any) -> Any:
    """A job field as recorded: JSON scalars only (a nested value is dropped)."""
    return value if isinstance(value, (str, int, float, bool)) or value is None else None


def _merge_request(ctx: EventContext, item: MrItem, payload: dict[str, Any]) -> None:
    action = _attributes(payload).get("action")
    if not isinstance(action, str):
        return
    trigger = _trigger(ctx.event_type, payload, action=action)
    if action in PHASE_ACTIONS:
        set_phase(ctx.session, item, PHASE_ACTIONS[action], actor=SYSTEM, trigger=trigger)
    elif action in RECONCILE_ACTIONS:
        _needs(ctx, "needs_reconcile", trigger)


def _pipeline(ctx: EventContext, item: MrItem, payload: dict[str, Any]) -> None:
    attributes = _attributes(payload)
    pipeline_id = _number(attributes.get("id"), MAX_INT64)
    if pipeline_id is None:
        return
    head = item.head_pipeline_id
    if head is not None and pipeline_id < head:
        raise StaleEvent(f"pipeline {pipeline_id} is older than the head pipeline {head}")
    item.head_pipeline_id = pipeline_id
    status = attributes.get("status")
    if status in ("success", "failed"):
        _needs(ctx, "needs_reconcile", _trigger(ctx.event_type, payload, status=status))


def _build(ctx: EventContext, item: MrItem, payload: dict[str, Any]) -> None:
    build_id = _number(payload.get("build_id"), MAX_INT64)
    pipeline = payload.get("pipeline")
    pipeline_id = _number(payload.get("pipeline_id"), MAX_INT64) or (
        _number(pipeline.get("id"), MAX_INT64) if isinstance(pipeline, dict) else None
    )
    if build_id is None or pipeline_id is None:
        return
    head = item.head_pipeline_id
    if head is not None and pipeline_id < head:
        raise StaleEvent(
            f"job {build_id} belongs to pipeline {pipeline_id}, older than the head {head}"
        )
    row = item.status("needs_ci_retry")
    detail = row.detail if row is not None and isinstance(row.detail, dict) else {}
    jobs = list(detail.get("jobs", []))
    seen = seen_builds(detail)
    failed = payload.get("build_status") == "failed"
    if failed and (build_id in seen or any(job.get("build_id") == build_id for job in jobs)):
        raise StaleEvent(f"job {build_id} is already recorded")
    item.head_pipeline_id = pipeline_id  # build events follow the head pipeline too
    if not failed:
        return
    job = {name: _scalar(payload.get(name)) for name in JOB_FIELDS}
    job["build_id"], job["pipeline_id"] = build_id, pipeline_id
    jobs.append(job)
    jobs.sort(key=lambda entry: entry.get("build_id") or 0)
    _needs(
        ctx,
        "needs_ci_retry",
        _trigger(ctx.event_type, payload),
        detail={"jobs": jobs[-MAX_RECORDED_JOBS:], "seen": remember_build(seen, build_id)},
        pending_until=None,
    )


def seen_builds(detail: Any) -> list[int]:
    """The failed build ids the `needs_ci_retry` detail remembers, oldest first."""
    seen = detail.get("seen") if isinstance(detail, dict) else None
    return [n for n in seen if isinstance(n, int)] if isinstance(seen, list) else []


def remember_build(seen: list[int], build_id: int) -> list[int]:
    """`seen` with `build_id` added, bounded to the newest MAX_SEEN_BUILDS ids."""
    return sorted({*seen, build_id})[-MAX_SEEN_BUILDS:]


def handle(ctx: EventContext) -> None:
    """Apply one GitLab event to one MR item."""
    item = cast(MrItem, ctx.item)
    payload = ctx.payload if isinstance(ctx.payload, dict) else {}
    if ctx.event_type == "merge_request":
        _merge_request(ctx, item, payload)
    elif ctx.event_type == "pipeline":
        _pipeline(ctx, item, payload)
    elif ctx.event_type == "build":
        _build(ctx, item, payload)
