"""The shapes of the server's answers, as the client checks them before using them.

These are the daemon's response models (`wq.daemon.schemas`, `wq.daemon.routers.*`, same
names, same fields, same required ones) seen as JSON: timestamps, ids and enums are
strings. They are not imported from the daemon because that would load FastAPI,
SQLAlchemy and the engine at every `wq` command; `tests/client/test_schemas.py` keeps
the two in step. Validation is strict (a count must be a number, not "5") and nothing is
converted: the client returns the server's document itself, so `-o json` prints what the
server said. Importing this module loads pydantic: the API client does it only when an
answer arrives, and each model builds its validator on first use.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, RootModel, ValidationError


class Shape(BaseModel):
    """A JSON object the client reads; unknown keys are allowed (newer servers add some)."""

    model_config = ConfigDict(strict=True, defer_build=True)


T = TypeVar("T")
# A list read up to its first wrong entry: a wrong answer (another server at the URL)
# of a hundred thousand entries made as many sets of errors, gigabytes for a megabyte.
Listed = Annotated[list[T], Field(fail_fast=True)]


# ------------------------------------------------------------------ work items


class DimensionPublic(Shape):
    """One readiness dimension of an item."""

    dimension: str
    variant: str
    status: str
    detail: Any = None
    pending_until: str | None = None
    updated_at: str


class WorkItemPublic(Shape):
    """A work item with its type `details` and its dimensions."""

    id: str
    type: str
    project: str
    phase: str
    attempts: int
    error: str | None
    admission: str
    lane: str
    seq: int | None
    autonomous: bool
    dedup_key: str | None
    idempotency_key: str | None
    leased_until: str | None
    lease_owner: str | None
    run_after: str | None
    last_event_at: str | None
    queued_at: str | None
    admitted_at: str | None
    created_at: str
    updated_at: str
    details: dict[str, Any]
    dimensions: Listed[DimensionPublic]


class WorkItemRef(Shape):
    """What a caller without `read` on an item's type learns of it."""

    id: str
    phase: str


class WorkItemPage(Shape):
    """One page of items."""

    items: Listed[WorkItemPublic]
    next_cursor: str | None


class Retried(RootModel[WorkItemPublic | WorkItemRef]):
    """The answer to a retry."""

    model_config = ConfigDict(strict=True, defer_build=True)


class SubmissionPublic(Shape):
    """What a submission did, and the item it concerns (its id and phase alone for a
    caller without `read` on its type)."""

    action: str
    item: WorkItemPublic | WorkItemRef


class CancelPublic(Shape):
    """What a cancel did."""

    action: str
    item: WorkItemPublic | WorkItemRef


class AuditEntryPublic(Shape):
    """One entry of an item's history."""

    id: int
    at: str
    event_type: str
    actor: str
    old_state: Any = None
    new_state: Any = None
    trigger: Any = None
    metadata: Any = None


class HistoryPage(Shape):
    """One page of an item's history."""

    entries: Listed[AuditEntryPublic]
    next_cursor: str | None


class PendingEventPublic(Shape):
    """An event stored for an item and not applied yet."""

    id: int
    event_type: str
    event_at: str | None
    created_at: str
    payload: Any = None


class PendingEventPage(Shape):
    """One page of an item's pending events."""

    events: Listed[PendingEventPublic]
    next_cursor: str | None


# ------------------------------------------------------------------ pools and queues


class LanePublic(Shape):
    """Usage of one lane."""

    capacity: int
    in_flight: int
    queued: int


class PoolPublic(Shape):
    """One project's pool."""

    project: str
    capacity: int
    alert_capacity: int
    queued_autonomous_cap: int
    normal: LanePublic
    alert: LanePublic
    queued_autonomous: int
    oldest_queued_at: str | None
    oldest_queued_age_seconds: float | None
    backing_off: int = 0
    failed: int = 0


class Pools(RootModel[Listed[PoolPublic]]):
    """Every project's pool."""

    model_config = ConfigDict(strict=True, defer_build=True)


# ------------------------------------------------------------------ replicas


class ReplicaPublic(Shape):
    """One daemon sharing the database, as its last heartbeat described it."""

    id: str
    host: str
    pid: int
    version: str
    state: Literal["alive", "lost"]
    started_at: str
    heartbeat_at: str
    heartbeat_age_seconds: float
    heartbeat_seconds: float
    workers_busy: int
    workers_total: int
    leases_held: int
    being_rescued: int
    consumes_events: bool
    last_event_at: str | None
    db_round_trip_ms: float | None


class Replicas(RootModel[Listed[ReplicaPublic]]):
    """Every replica."""

    model_config = ConfigDict(strict=True, defer_build=True)


# ------------------------------------------------------------------ bulk actions


class BulkOutcomePublic(Shape):
    """One selected item and what became of it."""

    id: str
    type: str
    outcome: str
    error: str | None = None


class BulkPublic(Shape):
    """A bulk retry's or cancel's outcomes; `more`: others match beyond the limit."""

    results: Listed[BulkOutcomePublic]
    more: bool


# ------------------------------------------------------------------ stats


class BucketPublic(Shape):
    """One step of a stats window."""

    start: str
    created: int
    admitted: int
    completed: int
    failed: int
    retried: int
    cancelled: int
    wait_p50_seconds: float | None
    wait_p95_seconds: float | None
    run_p50_seconds: float | None
    run_p95_seconds: float | None


class LaneNowPublic(Shape):
    """A lane's queue now."""

    lane: str
    depth: int
    oldest_queued_at: str | None
    oldest_wait_seconds: float | None


class StatsPublic(Shape):
    """A stats window: its buckets, oldest first, and each lane's queue now."""

    start: str
    end: str
    step_seconds: int
    buckets: Listed[BucketPublic]
    lanes: Listed[LaneNowPublic]
    pending_events: int = 0


class QueueEntryPublic(Shape):
    """One queued item and its position in its lane."""

    position: int
    id: str
    type: str
    project: str
    lane: str
    seq: int
    autonomous: bool
    queued_at: str | None
    attempts: int = 0
    run_after: str | None = None


class QueueEntries(RootModel[Listed[QueueEntryPublic]]):
    """A project's queue."""

    model_config = ConfigDict(strict=True, defer_build=True)


class QueuePagePublic(Shape):
    """One page of a lane's queue."""

    entries: Listed[QueueEntryPublic]
    next_cursor: str | None


# ------------------------------------------------------------------ identity and service


class AuthenticationPublic(Shape):
    """How the caller authenticated."""

    tier: str
    identity: str
    groups: list[str] | None = None
    issuer: str | None = None
    claims: dict[str, Any] | None = None


class AuthorizationPublic(Shape):
    """What the caller may do, and the rules that say so."""

    effective_permissions: dict[str, list[str]]
    matching_rules: list[dict[str, Any]]


class WhoamiPublic(Shape):
    """The caller's identity and permissions."""

    authentication: AuthenticationPublic
    authorization: AuthorizationPublic


class Health(Shape):
    """The daemon's health."""

    status: str
    database: str


class OpenApiPaths(Shape):
    """The part of the OpenAPI document `wq submit` reads: each path's operations."""

    paths: dict[str, dict[str, Any]]


# ------------------------------------------------------------------ problems

_JSON_TYPES: tuple[tuple[type | tuple[type, ...], str], ...] = (
    (bool, "a boolean"),
    ((int, float), "a number"),
    (str, "a string"),
    (list, "a list"),
    (dict, "an object"),
)
_EXPECTED = {
    "model_type": "an object",
    "model_attributes_type": "an object",
    "dict_type": "an object",
    "list_type": "a list",
    "string_type": "a string",
    "int_type": "an integer",
    "float_type": "a number",
    "bool_type": "a boolean",
}
MAX_PLACE = 60
_MODEL_NAMES = frozenset(
    name
    for name, value in list(globals().items())
    if isinstance(value, type) and issubclass(value, BaseModel)
)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    for kinds, name in _JSON_TYPES:
        if isinstance(value, kinds):
            return name
    return type(value).__name__


def problem(error: ValidationError) -> str:
    """The first thing wrong with a document, in words: `items.0.id: missing`."""
    errors = error.errors(include_url=False)
    first = errors[0]
    # A union's errors name the model they tried (`item.WorkItemRef.id`): not the server's.
    place = ".".join(str(part) for part in first["loc"] if part not in _MODEL_NAMES)
    if len(place) > MAX_PLACE:
        place = "…" + place[-MAX_PLACE:]
    expected = _EXPECTED.get(first["type"])
    if first["type"] == "missing":
        said = "missing"
    elif expected is not None:
        said = f"expected {expected}, got {_json_type(first['input'])}"
    else:
        said = first["msg"]
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{place}: {said}{more}" if place else f"{said}{more}"
