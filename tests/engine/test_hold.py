"""A decider can hold an item's slot while external work runs (`Wait`).

The `hold` test type starts a pretend run, then checks it at intervals: between
checks the item stays admitted (its slot taken) with no lease and no worker; when
the run is over it completes and frees the slot for the next item.
"""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel
from sqlalchemy.orm import Session

from tests.conftest import Store, make_config
from tests.engine.helpers import audit_types, load
from tests.support.waiting import wait_for
from wq.engine import items
from wq.engine.models import COMPLETED, WorkItem, utcnow
from wq.engine.processing import ProcessingManager
from wq.engine.registry import (
    ActionContext,
    Decision,
    ItemType,
    Submission,
    SubmitContext,
    SubmitResult,
    TypeRegistry,
    Wait,
)

CHECK_EVERY = timedelta(milliseconds=50)


class HoldItem(WorkItem):
    """A `hold` item: no detail table; its run lives in the test's `Runs`."""

    __mapper_args__ = {"polymorphic_identity": "hold"}  # noqa: RUF012


@dataclass
class Runs:
    """Pretend external runs: started, finished, how often they were checked."""

    started: set[uuid.UUID] = field(default_factory=set)
    finished: set[uuid.UUID] = field(default_factory=set)
    checks: dict[uuid.UUID, int] = field(default_factory=dict)
    next_check: dict[uuid.UUID, datetime] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def decide(self, item: WorkItem, now: datetime) -> Decision:
        with self.lock:
            if item.id not in self.started:
                return "start"
            due = self.next_check.get(item.id, now)
            return "follow" if due <= now else Wait(due)

    def start(self, ctx: ActionContext) -> None:
        with self.lock:
            self.started.add(ctx.item.id)
            self.next_check[ctx.item.id] = ctx.now + CHECK_EVERY

    def follow(self, ctx: ActionContext) -> None:
        with self.lock:
            self.checks[ctx.item.id] = self.checks.get(ctx.item.id, 0) + 1
            self.next_check[ctx.item.id] = ctx.now + CHECK_EVERY
            done = ctx.item.id in self.finished
        if done:
            items.set_phase(
                ctx.session, ctx.item, COMPLETED, actor="test", trigger={"source": "worker"}
            )


class HoldCreate(BaseModel):
    """Submission payload of a hold item."""

    project: str


def hold_registry(runs: Runs) -> TypeRegistry:
    def submit(session: Session, payload: HoldCreate, ctx: SubmitContext) -> SubmitResult:
        return items.submit(
            session,
            HoldItem(project=payload.project, lane="normal", autonomous=False),
            registry=ctx.registry,
            pool=ctx.pool,
            now=ctx.now,
            actor=ctx.actor,
            trigger={"source": "test"},
        )

    registry = TypeRegistry()
    registry.register_type(
        ItemType(
            name="hold",
            model=HoldItem,
            decider=runs.decide,
            executors={"start": runs.start, "follow": runs.follow},
            submission=Submission(HoldCreate, lambda payload: payload.project, submit),
        )
    )
    return registry


def submit_hold(store: Store, registry: TypeRegistry, config: Any) -> uuid.UUID:
    with store.sessions.begin() as session:
        result = items.submit(
            session,
            HoldItem(project="g/p", lane="normal", autonomous=False),
            registry=registry,
            pool=config.pool_for("g/p"),
            now=utcnow(),
            actor="test",
            trigger={"source": "test"},
        )
        assert result.item is not None
        return result.item.id


def test_a_running_item_keeps_its_slot_until_it_is_terminal(
    store: Store, managers: list[Any]
) -> None:
    runs = Runs()
    config = make_config(store.url, pools={"default": {"capacity": 1}})
    manager = ProcessingManager(store.sessions, hold_registry(runs), config)
    manager.start()
    managers.append(manager)
    first = submit_hold(store, manager.registry, config)
    second = submit_hold(store, manager.registry, config)

    # The first is checked again and again; all that time it holds the only slot,
    # owns no lease and occupies no worker, and the second waits in the queue.
    wait_for(lambda: runs.checks.get(first, 0) >= 3, message="three checks of the first run")
    held = load(store.sessions, first)
    assert held.admission == "admitted" and held.phase == "active"
    assert load(store.sessions, second).admission == "queued"
    assert second not in runs.started
    wait_for(lambda: load(store.sessions, first).lease_token is None, message="lease dropped")

    with runs.lock:
        runs.finished.add(first)
    wait_for(lambda: second in runs.started, message="the second run started")
    done = load(store.sessions, first)
    assert done.phase == COMPLETED and done.admission == "done"
    assert load(store.sessions, second).admission == "admitted"
    # Holding writes no audit rows: one `released` at the end, none per check.
    trail = audit_types(store.sessions, first)
    assert trail.count("released") == 1
    assert trail.count("action_completed") == runs.checks[first] + 1


def test_a_held_item_is_claimed_again_only_when_its_wait_is_over(store: Store) -> None:
    runs = Runs()
    config = make_config(store.url)
    manager = ProcessingManager(store.sessions, hold_registry(runs), config)
    item_id = submit_hold(store, manager.registry, config)
    manager.run_once(projects={"g/p"})
    wait_for(lambda: item_id in runs.started and manager.busy == 0, message="run started")
    held = load(store.sessions, item_id)
    assert held.admission == "admitted" and held.run_after is not None
    assert held.run_after > utcnow() - timedelta(seconds=5)
    with runs.lock:
        runs.next_check[item_id] = utcnow() + timedelta(hours=1)
    with store.sessions.begin() as session:
        session.get(WorkItem, item_id).run_after = runs.next_check[item_id]  # type: ignore[union-attr]
    assert manager.run_once() == 0  # not due: nothing to claim
    with runs.lock:
        runs.next_check[item_id] = utcnow()
    with store.sessions.begin() as session:
        session.get(WorkItem, item_id).run_after = utcnow()  # type: ignore[union-attr]
    assert manager.run_once() == 1
    wait_for(lambda: runs.checks.get(item_id, 0) >= 1, message="checked once it was due")
    manager.stop(grace=2)
