"""A test-only work-item type, `chain`: three actions in order, then idle.

Each action clears its `needs_stepN` dimension. Executions are recorded (in memory,
and optionally appended to a file so several processes can be checked together);
tests can make an action slow or fail a number of times.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel
from sqlalchemy.orm import Session

from wq.engine import items
from wq.engine.dimensions import first_actionable, set_dimension
from wq.engine.models import WorkItem
from wq.engine.registry import (
    ActionContext,
    EventContext,
    ItemType,
    Requeue,
    Submission,
    SubmitContext,
    SubmitResult,
    TypeRegistry,
)

STEPS = ("step1", "step2", "step3")


class ChainItem(WorkItem):
    """A chain item: no detail table, the generic columns are enough."""

    __mapper_args__ = {"polymorphic_identity": "chain"}  # noqa: RUF012

    def details_dict(self) -> dict[str, object]:
        return {"steps": list(STEPS)}


@dataclass
class Behaviour:
    """How the executors behave and what they saw."""

    sleep: dict[str, float] = field(default_factory=dict)
    fail_times: dict[str, int] = field(default_factory=dict)
    # Times a step cannot even begin (Requeue), and the wait it asks for then.
    requeue_times: dict[str, int] = field(default_factory=dict)
    requeue_seconds: float = 0.5
    log_file: Path | None = None
    # Lines "start|end ITEM ACTION PID TIME" for overlap checks across processes.
    trace_file: Path | None = None
    calls: list[tuple[uuid.UUID, str]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, item_id: uuid.UUID, action: str) -> None:
        with self._lock:
            self.calls.append((item_id, action))
        if self.log_file is not None:
            fd = os.open(self.log_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, f"{item_id} {action}\n".encode())
            finally:
                os.close(fd)

    def trace(self, what: str, item_id: uuid.UUID, action: str) -> None:
        if self.trace_file is not None:
            line = f"{what} {item_id} {action} {os.getpid()} {time.time():.3f}\n"
            fd = os.open(self.trace_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, line.encode())
            finally:
                os.close(fd)

    def should_fail(self, action: str, times: dict[str, int] | None = None) -> bool:
        """Whether `action` fails now (`fail_times`, or the given counts), counting down."""
        counts = self.fail_times if times is None else times
        with self._lock:
            left = counts.get(action, 0)
            if left > 0:
                counts[action] = left - 1
                return True
            return False

    def counts(self) -> Counter[tuple[uuid.UUID, str]]:
        with self._lock:
            return Counter(self.calls)

    def actions_of(self, item_id: uuid.UUID) -> list[str]:
        with self._lock:
            return [action for seen, action in self.calls if seen == item_id]


def decide(item: WorkItem, now: datetime) -> str | None:
    """The first step whose dimension still needs action."""
    dimension = first_actionable(item, [f"needs_{step}" for step in STEPS], now)
    return dimension.removeprefix("needs_") if dimension else None


def make_executor(step: str, behaviour: Behaviour):  # type: ignore[no-untyped-def]
    def run(ctx: ActionContext) -> None:
        behaviour.record(ctx.item.id, step)
        behaviour.trace("start", ctx.item.id, step)
        try:
            if behaviour.sleep.get(step):
                time.sleep(behaviour.sleep[step])
            if behaviour.should_fail(step, behaviour.requeue_times):
                raise Requeue(f"{step} cannot begin", retry_after=behaviour.requeue_seconds)
            if behaviour.should_fail(step):
                raise RuntimeError(f"{step} failed on purpose")
            set_dimension(ctx.session, ctx.item, f"needs_{step}", False)
        finally:
            behaviour.trace("end", ctx.item.id, step)

    return run


def handle_event(ctx: EventContext) -> None:
    """`redo`: step3 is needed again; `cancel`: the item is cancelled."""
    if ctx.event_type == "redo":
        set_dimension(ctx.session, ctx.item, "needs_step3", True)
    elif ctx.event_type == "cancel":
        ctx.item.phase = "cancelled"


class ChainCreate(BaseModel):
    """The submission payload of a chain item."""

    project: str
    lane: Literal["normal", "alert"] = "normal"
    autonomous: bool = False
    dedup_key: str | None = None


def submit_chain(session: Session, payload: ChainCreate, ctx: SubmitContext) -> SubmitResult:
    return items.submit(
        session,
        new_chain_item(
            payload.project,
            lane=payload.lane,
            autonomous=payload.autonomous,
            dedup_key=payload.dedup_key,
        ),
        registry=ctx.registry,
        pool=ctx.pool,
        now=ctx.now,
        actor=ctx.actor,
        trigger={"source": "api"},
    )


def chain_type(behaviour: Behaviour, *, cheap: bool = False) -> ItemType:
    """The `chain` type bound to a behaviour; `cheap`: its steps run in the scheduler's batch."""
    return ItemType(
        name="chain",
        model=ChainItem,
        decider=decide,
        executors={step: make_executor(step, behaviour) for step in STEPS},
        event_handler=handle_event,
        submission=Submission(
            schema=ChainCreate, project_of=lambda payload: payload.project, handle=submit_chain
        ),
        cheap_actions=frozenset(STEPS) if cheap else frozenset(),
    )


def chain_registry(behaviour: Behaviour, *, cheap: bool = False) -> TypeRegistry:
    """A registry with only the chain type."""
    registry = TypeRegistry()
    registry.register_type(chain_type(behaviour, cheap=cheap))
    return registry


def new_chain_item(project: str = "group/project", **fields: object) -> ChainItem:
    """An unsaved chain item for `items.submit`."""
    return ChainItem(
        project=project,
        lane=fields.pop("lane", "normal"),
        autonomous=fields.pop("autonomous", False),
        **fields,
    )
