"""`POST /api/work-items/retry` and `/cancel`: act on the items a selector matches."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Annotated, Literal, Self

from fastapi import APIRouter, Request
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator
from sqlalchemy import Row
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from wq.daemon.auth import Principal, authorize, authorize_item, authorize_lookup, lacks
from wq.daemon.body import ParsedBodyRoute
from wq.daemon.contract import api_responses
from wq.daemon.deps import NO_NUL, PrincipalDep, ProjectName, RuntimeDep
from wq.daemon.routers.submissions import only_post
from wq.daemon.runtime import Runtime
from wq.engine import bulk
from wq.engine.models import utcnow

router = APIRouter(prefix="/api/work-items", tags=["work items"], route_class=ParsedBodyRoute)

MAX_LIMIT = 1000
# The fields that select items; `limit` and `dry_run` alone select nothing.
SELECTORS = frozenset(
    {"phase", "type", "project", "kind", "error_contains", "older_than_seconds", "ids"}
)


def whole_number(value: object) -> object:
    """JSON's integers: `100` and `100.0` alike (JSON Schema's `integer`), nothing else."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


class BulkRequest(BaseModel):
    """A selector (every given field must hold), how many at most, and whether to act."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        # As `_selects` has it: at least one selector, not null.
        json_schema_extra={
            "anyOf": [
                {"required": [name], "properties": {name: {"not": {"type": "null"}}}}
                for name in sorted(SELECTORS)
            ]
        },
    )

    type: Annotated[str, Field(min_length=1, max_length=64, pattern=NO_NUL)] | None = None
    project: Annotated[ProjectName, Field(min_length=1, max_length=512)] | None = None
    kind: Annotated[str, Field(min_length=1, max_length=128, pattern=NO_NUL)] | None = Field(
        None, description="a task kind (types without kinds are left out)"
    )
    error_contains: Annotated[str, Field(min_length=1, max_length=512, pattern=NO_NUL)] | None = (
        Field(None, description="the item's error holds this text (any case)")
    )
    older_than_seconds: Annotated[float, Field(ge=0, le=10 * 365 * 86400)] | None = Field(
        None, description="in its state for longer than this"
    )
    ids: (
        Annotated[list[Annotated[uuid.UUID, Field(strict=False)]], Field(max_length=MAX_LIMIT)]
        | None
    ) = Field(
        None,
        description="only these of the matching items (what a dry run listed and was confirmed)",
    )
    limit: Annotated[int, Field(ge=1, le=MAX_LIMIT), BeforeValidator(whole_number)] = 100
    dry_run: bool = Field(False, description="list what would be done, change nothing")

    @model_validator(mode="after")
    def _selects(self) -> Self:
        """Something selects: an empty body would act on every item of the phase."""
        given = {
            name for name in self.model_fields_set & SELECTORS if getattr(self, name) is not None
        }
        if not given:
            raise ValueError(
                "select the items: give ids, or at least one of "
                + ", ".join(sorted(SELECTORS - {"ids"}))
                + " (a selector that names nothing would act on every item in the phase)"
            )
        return self


class RetryRequest(BulkRequest):
    """Which failed or cancelled items to retry."""

    phase: Literal["failed", "cancelled"] = "failed"


class CancelRequest(BulkRequest):
    """Which active items to cancel."""

    phase: Literal["active"] = "active"


class BulkOutcomePublic(BaseModel):
    """One selected item and what became of it (`error`: why it was skipped)."""

    id: uuid.UUID
    type: str
    outcome: Literal["retried", "cancelled", "requested", "selected", "skipped"]
    error: str | None = None


class BulkPublic(BaseModel):
    """Every selected item's outcome, oldest first, then each named id left out
    (`skipped`, with why); `more`: others match beyond `limit`."""

    results: list[BulkOutcomePublic]
    more: bool


def _refusal(principal: Principal, row: Row[uuid.UUID, str, str]) -> str:
    """Why a named item is skipped, as `authorize_item` says it of one alone: what the
    caller lacks, or, to one who may not read its type, that it does not exist."""
    if principal.allows("read", row.type):
        return lacks(principal, "retry", row.type, row.project)
    return f"work item {row.id} not found"


def _run(
    runtime: Runtime,
    request: Request,
    principal: Principal,
    action: str,
    body: RetryRequest | CancelRequest,
) -> BulkPublic:
    if body.type is not None and body.type in runtime.registry.names:
        # A type named outright is refused as such: leaving it out of the selection
        # answered "no items match" to a caller who may not act on it.
        authorize(request, principal, "retry", body.type)
    selector = bulk.Selector(
        phase=body.phase,
        type=body.type,
        project=body.project,
        kind=body.kind,
        error_contains=body.error_contains,
        older_than=(
            None if body.older_than_seconds is None else timedelta(seconds=body.older_than_seconds)
        ),
        ids=None if body.ids is None else tuple(body.ids),
    )
    # Types the caller may not act on are left out: their items are neither shown nor
    # counted, as an item of such a type is not found one at a time. With a project
    # named, a grant limited to projects counts where it covers that project; with ids
    # alone, where it covers each item's project (told apart below, as one at a time).
    by_item = body.ids is not None and body.project is None
    types = [
        name
        for name in runtime.registry.names
        if principal.allows("retry", name, body.project)
        or (by_item and principal.allows_in_some_project("retry", name))
    ]
    if body.project is not None and not types:
        # Named outright, as a type is: "no items match" would hide items the caller
        # can see but may not act on.
        authorize(request, principal, "retry", body.type, project=body.project)
    query = bulk.statement(
        action, selector, types=types, registry=runtime.registry, now=utcnow(), limit=body.limit
    )
    with runtime.read_sessions() as session:
        rows = list(session.execute(query))
        more = len(rows) > body.limit
        projects = {row.id: row.project for row in rows}
        selected, outside = [], []
        for row in rows[: body.limit]:
            if principal.allows("retry", row.type, row.project):
                selected.append((row.id, row.type))
            else:  # a named item of a project the grant does not cover: as one alone
                outside.append(bulk.Outcome(row.id, row.type, "skipped", _refusal(principal, row)))
        # Named ids left out are told apart, unless they may be among the `more`.
        skipped = (
            []
            if more
            else bulk.unmatched(
                session,
                action,
                selector,
                [item_id for item_id, _ in selected] + [outcome.id for outcome in outside],
                types=types,
                registry=runtime.registry,
            )
        )
    if body.dry_run:
        outcomes = [bulk.Outcome(item_id, item_type, "selected") for item_id, item_type in selected]
    else:

        def permitted(session: Session, item_id: uuid.UUID, item_type: str) -> None:
            authorize_item(
                request,
                principal,
                "retry",
                item_id,
                item_type,
                project=projects[item_id],
                session=session,
            )

        outcomes = bulk.act(
            runtime.sessions,
            action,
            selected,
            registry=runtime.registry,
            actor=principal.actor,
            now=utcnow,
            before=permitted,
        )
    return BulkPublic(
        results=[
            BulkOutcomePublic.model_validate(vars(outcome))
            for outcome in [*outcomes, *outside, *skipped]
        ],
        more=more,
    )


# 400: a body FastAPI cannot decode (not UTF-8).
RESPONSES = api_responses(400, body=True)


@router.post("/retry", response_model=BulkPublic, responses=RESPONSES)
async def retry_items(
    request: Request, body: RetryRequest, runtime: RuntimeDep, principal: PrincipalDep
) -> BulkPublic:
    """Retry the failed (or cancelled) items the selector matches, up to `limit`, each
    audited as a retry of one item; `dry_run` lists them only (`retry` permission)."""
    authorize_lookup(principal, "retry")
    return await run_in_threadpool(_run, runtime, request, principal, "retry", body)


@router.post("/cancel", response_model=BulkPublic, responses=RESPONSES)
async def cancel_items(
    request: Request, body: CancelRequest, runtime: RuntimeDep, principal: PrincipalDep
) -> BulkPublic:
    """Cancel the active items the selector matches, up to `limit`, each as a cancel of
    one item (`requested` while its run is stopped); `dry_run` lists them only."""
    authorize_lookup(principal, "retry")
    return await run_in_threadpool(_run, runtime, request, principal, "cancel", body)


# Another method on these paths is POST's 405, not the item route's answer (its
# `{item_id}` would take "retry" by the path alone).
for _path in ("/retry", "/cancel"):
    router.add_api_route(
        _path,
        only_post,
        methods=["GET", "PUT", "PATCH", "DELETE"],
        include_in_schema=False,
        name=f"only_post{_path.replace('/', '_')}",
    )
