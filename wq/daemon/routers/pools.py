"""Admission views: per-project pools and the FIFO queue."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Path, Query
from pydantic import BaseModel, ConfigDict, Field
from starlette.convertors import PathConvertor, register_url_convertor

from wq.daemon.auth import Principal
from wq.daemon.contract import API_ROUTE, api_responses, error_responses
from wq.daemon.deps import ReadSessionDep, RuntimeDep, require_to_read
from wq.daemon.schemas import Lane
from wq.engine import pools
from wq.engine.models import utcnow
from wq.types.project import ProjectPath

router = APIRouter(prefix="/api", tags=["admission"])


class ProjectConvertor(PathConvertor):
    """Starlette's `path`, newlines included (`.*` stops at one, and the route would be
    a 404 the document does not name): the parameter's pattern decides, as on any route."""

    regex = r"[\s\S]*"


register_url_convertor("project", ProjectConvertor())
ReadPrincipal = Annotated[Principal, Depends(require_to_read())]
# The seq of the last entry of the previous page; 18 digits stay below 2**63.
QUEUE_CURSOR = r"^[0-9]{1,18}$"


class LanePublic(BaseModel):
    """Usage of one lane."""

    capacity: int
    in_flight: int
    queued: int


class PoolPublic(BaseModel):
    """One project's pool."""

    project: str
    capacity: int
    alert_capacity: int
    queued_autonomous_cap: int
    normal: LanePublic
    alert: LanePublic
    queued_autonomous: int
    oldest_queued_at: datetime | None
    oldest_queued_age_seconds: float | None
    backing_off: int = Field(
        0, description="queued or admitted items that failed an attempt and wait to be retried"
    )
    failed: int = Field(0, description="the project's items in phase failed")

    @classmethod
    def of(cls, status: pools.PoolStatus) -> PoolPublic:
        """Build from the engine's view."""
        oldest = status.oldest_queued_at
        return cls(
            project=status.project,
            capacity=status.capacity,
            alert_capacity=status.alert_capacity,
            queued_autonomous_cap=status.queued_autonomous_cap,
            normal=LanePublic(**vars(status.lanes["normal"])),
            alert=LanePublic(**vars(status.lanes["alert"])),
            queued_autonomous=status.queued_autonomous,
            oldest_queued_at=oldest,
            oldest_queued_age_seconds=(
                round((utcnow() - oldest).total_seconds(), 3) if oldest else None
            ),
            backing_off=status.backing_off,
            failed=status.failed,
        )


class QueueEntryPublic(BaseModel):
    """One queued item and its position in its lane."""

    model_config = ConfigDict(from_attributes=True)

    position: int
    id: uuid.UUID
    type: str
    project: str
    lane: Lane
    seq: int
    autonomous: bool
    queued_at: datetime | None
    attempts: int = 0
    run_after: datetime | None = Field(
        None, description="later than now for an item backing off: not admitted before then"
    )


class QueuePagePublic(BaseModel):
    """One page of a lane's FIFO, next first; pass `next_cursor` back as `cursor`."""

    entries: list[QueueEntryPublic]
    next_cursor: str | None


@router.get("/pools", response_model=list[PoolPublic], responses=error_responses(*API_ROUTE))
def read_pools(session: ReadSessionDep, runtime: RuntimeDep, _: ReadPrincipal) -> list[PoolPublic]:
    """Every project with queued or in-flight work, and its pool usage."""
    return [PoolPublic.of(status) for status in pools.pool_statuses(session, runtime.config)]


@router.get("/pools/{project:project}", response_model=PoolPublic, responses=api_responses())
def read_pool(
    project: Annotated[ProjectPath, Path(max_length=512)],
    session: ReadSessionDep,
    runtime: RuntimeDep,
    _: ReadPrincipal,
) -> PoolPublic:
    """One project's pool (capacities apply even when it has no work)."""
    (status,) = pools.pool_statuses(session, runtime.config, project)
    return PoolPublic.of(status)


@router.get("/queue", response_model=list[QueueEntryPublic], responses=api_responses())
def read_queue(
    session: ReadSessionDep,
    principal: ReadPrincipal,
    project: Annotated[
        ProjectPath, Query(max_length=512, description="the project whose queue to show")
    ],
    lane: Literal["alert", "normal"] | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> list[QueueEntryPublic]:
    """A project's queued items in admission order (alert lane first).

    Pools are shared by every type; items of types the caller may not read are left
    out, and the others keep their true positions.
    """
    return [
        QueueEntryPublic.model_validate(entry)
        for entry in pools.queue(session, project, lane, limit)
        if principal.allows("read", entry.type)
    ]


@router.get("/queue/{lane}", response_model=QueuePagePublic, responses=api_responses())
def read_queue_page(
    lane: Literal["alert", "normal"],
    session: ReadSessionDep,
    principal: ReadPrincipal,
    project: Annotated[
        ProjectPath, Query(max_length=512, description="the project whose queue to show")
    ],
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    cursor: Annotated[
        str | None,
        Query(
            max_length=18,
            pattern=QUEUE_CURSOR,
            description="the `next_cursor` of the previous page: the seq of its last entry",
        ),
    ] = None,
) -> QueuePagePublic:
    """One lane of a project's queue in admission order, a page at a time.

    Positions are true positions in the lane (1 = admitted next) on every page. Items
    of types the caller may not read are left out, so a page can be short; follow
    `next_cursor` until it is null.
    """
    after = None if cursor is None else int(cursor)
    page = pools.queue_page(session, project, lane, limit=limit, after=after)
    return QueuePagePublic(
        entries=[
            QueueEntryPublic.model_validate(entry)
            for entry in page.entries
            if principal.allows("read", entry.type)
        ],
        next_cursor=str(page.next_after) if page.next_after is not None else None,
    )
