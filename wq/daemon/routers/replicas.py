"""`GET /api/replicas`: every daemon sharing the database, alive or lost."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Depends
from pydantic import BaseModel

from wq.daemon.auth import Principal
from wq.daemon.contract import api_responses
from wq.daemon.deps import ReadSessionDep, require_to_read
from wq.engine.models import utcnow
from wq.engine.replicas import list_replicas

router = APIRouter(prefix="/api", tags=["replicas"])
ReadPrincipal = Annotated[Principal, Depends(require_to_read())]


class ReplicaPublic(BaseModel):
    """One daemon as its last heartbeat described it."""

    id: str
    host: str
    pid: int
    version: str
    state: Literal["alive", "lost"]
    started_at: datetime
    heartbeat_at: datetime
    heartbeat_age_seconds: float
    heartbeat_seconds: float
    workers_busy: int
    workers_total: int
    leases_held: int
    being_rescued: int
    consumes_events: bool
    last_event_at: datetime | None
    db_round_trip_ms: float | None


@router.get("/replicas", response_model=list[ReplicaPublic], responses=api_responses())
def read_replicas(session: ReadSessionDep, principal: ReadPrincipal) -> list[ReplicaPublic]:
    """Every replica with a row: alive ones first. A replica is lost when its heartbeat
    is older than three of its intervals; `being_rescued` counts the items it still
    leases, which the other replicas take over as the leases run out."""
    return [
        ReplicaPublic(
            id=view.row.id,
            host=view.row.host,
            pid=view.row.pid,
            version=view.row.version,
            state="alive" if view.alive else "lost",
            started_at=view.row.started_at,
            heartbeat_at=view.row.heartbeat_at,
            heartbeat_age_seconds=round(view.heartbeat_age_seconds, 3),
            heartbeat_seconds=view.row.heartbeat_seconds,
            workers_busy=view.row.workers_busy,
            workers_total=view.row.workers_total,
            leases_held=view.row.leases_held,
            being_rescued=view.being_rescued,
            consumes_events=view.row.consumes_events,
            last_event_at=view.row.last_event_at,
            db_round_trip_ms=view.row.db_round_trip_ms,
        )
        for view in list_replicas(session, utcnow())
    ]
