"""Admission views: per-project pools and the FIFO queue."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Path, Query
from pydantic import BaseModel

from wq.daemon.auth import Principal
from wq.daemon.deps import NO_NUL, ReadSessionDep, RuntimeDep, require
from wq.engine import pools
from wq.engine.models import utcnow

router = APIRouter(prefix="/api", tags=["admission"])
ReadPrincipal = Annotated[Principal, Depends(require("read"))]


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
        )


class QueueEntryPublic(BaseModel):
    """One queued item and its position in its lane."""

    position: int
    id: uuid.UUID
    type: str
    project: str
    lane: str
    seq: int
    autonomous: bool
    queued_at: datetime | None


@router.get("/pools", response_model=list[PoolPublic])
def read_pools(session: ReadSessionDep, runtime: RuntimeDep, _: ReadPrincipal) -> list[PoolPublic]:
    """Every project with queued or in-flight work, and its pool usage."""
    return [PoolPublic.of(status) for status in pools.pool_statuses(session, runtime.config)]


@router.get("/pools/{project:path}", response_model=PoolPublic)
def read_pool(
    project: Annotated[str, Path(pattern=NO_NUL)],
    session: ReadSessionDep,
    runtime: RuntimeDep,
    _: ReadPrincipal,
) -> PoolPublic:
    """One project's pool (capacities apply even when it has no work)."""
    (status,) = pools.pool_statuses(session, runtime.config, project)
    return PoolPublic.of(status)


@router.get("/queue", response_model=list[QueueEntryPublic])
def read_queue(
    session: ReadSessionDep,
    principal: ReadPrincipal,
    project: Annotated[
        str, Query(min_length=1, pattern=NO_NUL, description="the project whose queue to show")
    ],
    lane: Literal["alert", "normal"] | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> list[QueueEntryPublic]:
    """A project's queued items in admission order (alert lane first).

    Pools are shared by every type; items of types the caller may not read are left
    out, and the others keep their true positions.
    """
    return [
        QueueEntryPublic(**vars(entry))
        for entry in pools.queue(session, project, lane, limit)
        if principal.allows("read", entry.type)
    ]
