"""`GET /api/stats`: throughput, failures and waits over a window, and the lanes now."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Query
from pydantic import BaseModel

from wq.daemon.auth import Principal
from wq.daemon.contract import api_responses
from wq.daemon.deps import NO_NUL, ProjectName, ReadSessionDep, RuntimeDep, require_to_read
from wq.daemon.errors import say_pattern
from wq.daemon.schemas import Lane
from wq.engine import stats
from wq.engine.models import utcnow

router = APIRouter(prefix="/api", tags=["stats"])
ReadPrincipal = Annotated[Principal, Depends(require_to_read())]

# A number and a unit; the patterns hold the bounds: a window of 7d at most, a step
# of 10s at least.
WINDOW = say_pattern(
    r"^([1-9][0-9]{0,4}s|[1-9][0-9]{0,3}m|([1-9]|[1-9][0-9]|1[0-5][0-9]|16[0-8])h|[1-7]d)$",
    "a number and a unit (s, m, h or d), at most 7d, such as 30m, 24h or 7d",
)
STEP = say_pattern(
    r"^([1-9][0-9]{1,4}s|[1-9][0-9]{0,3}m|[1-9][0-9]{0,2}h|[1-9]d)$",
    "a number and a unit (s, m, h or d), at least 10s, such as 30s, 5m or 1h",
)
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
MAX_BUCKETS = 1440


class BucketPublic(BaseModel):
    """One step of the window: what happened in it, and how long items waited and ran."""

    start: datetime
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


class LaneNowPublic(BaseModel):
    """A lane's queue now: how many wait and since when the oldest does."""

    lane: Lane
    depth: int
    oldest_queued_at: datetime | None
    oldest_wait_seconds: float | None


class StatsPublic(BaseModel):
    """The window's buckets, oldest first, and each lane's queue now."""

    start: datetime
    end: datetime
    step_seconds: int
    buckets: list[BucketPublic]
    lanes: list[LaneNowPublic]
    pending_events: int = 0  # events stored and not applied yet, now


def parse_duration(name: str, text: str) -> timedelta:
    """`90s`, `5m`, `1h`, `7d` as a timedelta (the pattern was checked by the route)."""
    match = re.fullmatch(r"([0-9]+)([smhd])", text)
    if match is None:  # the route's pattern lets nothing else through
        raise HTTPException(422, f"{name}: a number and a unit (s, m, h, d), e.g. 1h")
    return timedelta(seconds=int(match.group(1)) * UNITS[match.group(2)])


def aligned_end(now: datetime, step: timedelta) -> datetime:
    """The end of the bucket `now` is in: buckets fall on multiples of the step, so two
    requests a moment apart agree on them (the last one is still filling)."""
    seconds = step.total_seconds()
    return datetime.fromtimestamp((now.timestamp() // seconds + 1) * seconds, UTC)


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _bucket(found: stats.Bucket) -> BucketPublic:
    return BucketPublic(
        start=found.start,
        **found.counts,
        wait_p50_seconds=_rounded(stats.percentile(found.waits, 0.5)),
        wait_p95_seconds=_rounded(stats.percentile(found.waits, 0.95)),
        run_p50_seconds=_rounded(stats.percentile(found.runs, 0.5)),
        run_p95_seconds=_rounded(stats.percentile(found.runs, 0.95)),
    )


@router.get("/stats", response_model=StatsPublic, responses=api_responses())
def read_stats(
    session: ReadSessionDep,
    runtime: RuntimeDep,
    principal: ReadPrincipal,
    window: Annotated[
        str, Query(pattern=WINDOW, description="how far back: 30m, 1h, 24h, 7d (at most 7d)")
    ] = "1h",
    step: Annotated[
        str,
        Query(
            pattern=STEP,
            description=(
                "the bucket size, 10s at least; a step finer than window/1440 is widened to"
                " it and one wider than the window narrowed to it (`step_seconds` says which)"
            ),
        ),
    ] = "1m",
    type: Annotated[
        str | None, Query(max_length=64, pattern=NO_NUL, description="only items of this type")
    ] = None,
    project: Annotated[
        ProjectName | None,
        Query(min_length=1, max_length=512, description="only this project"),
    ] = None,
) -> StatsPublic:
    """Counts per bucket (created, admitted, completed, failed, retried, cancelled), the
    p50/p95 of queued -> admitted and admitted -> done, and each lane's queue now."""
    window_delta = parse_duration("window", window)
    finest = timedelta(seconds=math.ceil(window_delta.total_seconds() / MAX_BUCKETS))
    step_delta = min(max(parse_duration("step", step), finest), window_delta)
    # Counts are not items: no type's documents are shown, but a type the caller may not
    # read is not counted for them either (an unknown type counts nothing, as in a list).
    if type is not None and type in runtime.registry.names and not principal.allows("read", type):
        raise HTTPException(403, f"no read permission on type {type}")
    readable = principal.types_with("read")
    item_types = None if readable is None else sorted(readable)
    if type is not None:
        item_types = [type] if item_types is None or type in item_types else []
    now = utcnow()
    found = stats.compute(
        session,
        end=aligned_end(now, step_delta),
        window=window_delta,
        step=step_delta,
        item_types=item_types,
        project=project,
    )
    return StatsPublic(
        start=found.start,
        end=found.end,
        step_seconds=int(step_delta.total_seconds()),
        buckets=[_bucket(bucket) for bucket in found.buckets],
        lanes=[
            LaneNowPublic(
                lane=lane.lane,  # type: ignore[arg-type]
                depth=lane.depth,
                oldest_queued_at=lane.oldest_queued_at,
                oldest_wait_seconds=(
                    _rounded((now - lane.oldest_queued_at).total_seconds())
                    if lane.oldest_queued_at
                    else None
                ),
            )
            for lane in found.lanes
        ],
        pending_events=found.pending_events,
    )
