"""Guards from the review of one-transaction batches (b358a5b).

A batch retried after an action raised leaves alone what another replica took
meanwhile; items waiting for a busy worker do not hold up purely cheap work; stop
ends the scheduler's wait for a batch slot; a worker's action whose writes the
database refuses is a failed action. The helpers also serve the tests of the bugs
found (branch review2).
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from dataclasses import replace
from datetime import timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from tests.conftest import Store, make_config
from tests.engine.helpers import audit_types, load, submit_many, wait_idle
from tests.support.chain import STEPS, Behaviour, chain_type, decide, make_executor
from wq.engine import items, leases
from wq.engine.admission import dispatch
from wq.engine.batch import BatchRunner
from wq.engine.config import Config
from wq.engine.models import AuditEntry, WorkItem, utcnow
from wq.engine.processing import ProcessingManager
from wq.engine.registry import ActionContext, ItemType, TypeRegistry
from wq.engine.runner import ItemRunner

BIG_POOLS = {"default": {"capacity": 1000, "alert_capacity": 1}}


class MixedItem(WorkItem):
    """A second test type beside `chain`: step1 cheap, the rest on a worker."""

    __mapper_args__ = {"polymorphic_identity": "review2_mixed"}  # noqa: RUF012


def steps_type(
    name: str, model: type[WorkItem], behaviour: Behaviour, cheap: frozenset[str]
) -> ItemType:
    return ItemType(
        name=name,
        model=model,
        decider=decide,
        executors={step: make_executor(step, behaviour) for step in STEPS},
        cheap_actions=cheap,
    )


def claim_for_a_worker(store: Store) -> leases.Claim:
    """The one admitted chain item, leased to worker `w` as a scheduler pass would."""
    now = utcnow()
    with store.sessions.begin() as session:
        (claim,) = leases.claim(
            session,
            owner="w",
            limit=1,
            types=["chain"],
            now=now,
            lease_until=now + timedelta(seconds=30),
        )
    return claim


def three_passes(runner: BatchRunner) -> None:
    """Three scheduler passes' batches; a pass whose batch fails is followed by the next."""
    for _ in range(3):
        with contextlib.suppress(Exception):
            runner.take("me", limit=10)


def registry_of(*types: ItemType) -> TypeRegistry:
    registry = TypeRegistry()
    for item_type in types:
        registry.register_type(item_type)
    return registry


def submit_models(
    store: Store, registry: TypeRegistry, config: Config, model: type[WorkItem], count: int
) -> list[uuid.UUID]:
    ids = []
    with store.sessions.begin() as session:
        for n in range(count):
            result = items.submit(
                session,
                model(project=f"g/m{n % 3}", lane="normal", autonomous=False),
                registry=registry,
                pool=config.pool_for("g/m"),
                now=utcnow(),
                actor="test",
                trigger={"source": "test"},
            )
            assert result.item is not None
            ids.append(result.item.id)
    return ids


def admit(store: Store, config: Config) -> None:
    dispatch(store.sessions, config, clock=utcnow)


def runner_of(store: Store, registry: TypeRegistry, config: Config) -> BatchRunner:
    return BatchRunner(store.sessions, registry, config.processing, utcnow)


class Gate:
    """An executor that records its start and waits until the test opens the gate."""

    def __init__(self, behaviour: Behaviour, step: str) -> None:
        self.go = threading.Event()
        self._run = make_executor(step, behaviour)

    def __call__(self, ctx: ActionContext) -> None:
        assert self.go.wait(20)
        self._run(ctx)


def events_of(store: Store, event_type: str) -> list[AuditEntry]:
    with store.sessions() as session:
        rows = session.execute(
            select(AuditEntry).where(AuditEntry.event_type == event_type).order_by(AuditEntry.id)
        ).scalars()
        found = list(rows)
        session.expunge_all()
        return found


# ------------------------------------------------- batches


def test_a_batch_retry_skips_an_item_another_replica_took_meanwhile(
    store: Store, monkeypatch: Any
) -> None:
    """After an action raised, the batch takes the same items again; one that another
    replica took in between is that replica's: processed once, the failure counted once."""
    behaviour = Behaviour()
    chain = chain_type(behaviour, cheap=True)
    config = make_config(store.url, pools=BIG_POOLS)
    first, second = submit_many(store.sessions, registry_of(chain), config, ["g/a", "g/b"])
    admit(store, config)
    failing = {second}
    step1 = chain.executors["step1"]

    def fail_second_once(ctx: ActionContext) -> None:
        step1(ctx)
        if ctx.item.id in failing:
            failing.clear()
            raise RuntimeError("step1 failed on purpose")

    registry = registry_of(replace(chain, executors={**chain.executors, "step1": fail_second_once}))
    real = leases.lock_claimable
    other_took: list[int] = []

    def meanwhile(session: Session, **kwargs: Any) -> list[WorkItem]:
        if kwargs.get("among") is not None and not other_took:
            # Between the rollback and the retry, another replica takes the first item.
            other_took.append(runner_of(store, registry, config).take("other", limit=1).taken)
        return real(session, **kwargs)

    monkeypatch.setattr(leases, "lock_claimable", meanwhile)
    taken = runner_of(store, registry, config).take("me", limit=5)
    assert other_took == [1] and taken.taken == 1
    # Its actions ran in the attempt that was rolled back, then once by the other replica.
    assert behaviour.actions_of(first) == list(STEPS) * 2
    assert behaviour.actions_of(second) == ["step1"]
    done = load(store.sessions, first)
    assert done.admission == "idle" and {row.status for row in done.statuses} == {"false"}
    backing_off = load(store.sessions, second)
    assert backing_off.attempts == 1 and backing_off.run_after is not None
    assert [row.work_item_id for row in events_of(store, "action_failed")] == [second]
    released = [row.work_item_id for row in events_of(store, "released")]
    assert released == [first]
    assert {row.actor for row in events_of(store, "action_completed")} == {"other/batch"}


def test_cheap_work_drains_while_an_item_waits_for_the_busy_worker(
    store: Store, managers: list[Any]
) -> None:
    """Items a batch gives back for want of a worker stop its pokes; the releases of
    the cheap items (their signals) must still chain the batches, or the backlog
    drains one batch per poll interval while the worker is busy (here 60 s)."""
    behaviour = Behaviour()
    gate = Gate(behaviour, "step2")
    mixed = steps_type("review2_mixed", MixedItem, behaviour, frozenset({"step1"}))
    mixed = replace(mixed, executors={**mixed.executors, "step2": gate})
    registry = registry_of(chain_type(behaviour, cheap=True), mixed)
    config = make_config(
        store.url,
        pools=BIG_POOLS,
        processing={
            "workers": 1,
            "batch_size": 3,
            "poll_interval_seconds": 60.0,
            "lease_seconds": 60.0,
        },
    )
    submit_models(store, registry, config, MixedItem, 2)  # ahead in line
    admit(store, config)
    time.sleep(0.01)
    cheap = submit_many(store.sessions, registry, config, [f"g/p{n % 4}" for n in range(15)])
    admit(store, config)
    manager = ProcessingManager(store.sessions, registry, config, owner="solo")
    manager.start()
    managers.append(manager)
    try:
        wait_idle(
            store.sessions,
            cheap,
            timeout=10,
            message="the cheap backlog drained while one item waits for the worker",
        )
    finally:
        gate.go.set()


# ------------------------------------------------- shutdown


def test_stop_while_the_scheduler_waits_for_a_batch_slot(store: Store) -> None:
    """Both batch slots busy, the scheduler waits for one; stop ends that wait, the
    running batches commit, and no batch starts after stop began."""
    behaviour = Behaviour()
    gate = Gate(behaviour, "step1")
    chain = chain_type(behaviour, cheap=True)
    registry = registry_of(replace(chain, executors={**chain.executors, "step1": gate}))
    config = make_config(store.url, pools=BIG_POOLS, processing={"batch_size": 1})
    ids = submit_many(store.sessions, registry, config, ["g/a", "g/b", "g/c"])
    admit(store, config)
    manager = ProcessingManager(store.sessions, registry, config, owner="solo")
    try:
        for _ in range(2):
            manager._scheduler._pass(projects=set(), event_items=frozenset(), background=True)
        waiting = threading.Thread(
            target=manager._scheduler._pass,
            kwargs={"projects": set(), "event_items": frozenset(), "background": True},
        )
        waiting.start()
        time.sleep(0.2)
        assert waiting.is_alive()  # no slot free
        manager.begin_stop(grace=10)
        waiting.join(timeout=5)
        assert not waiting.is_alive()
        gate.go.set()
        assert manager.stop(grace=10) == []
    finally:
        gate.go.set()
    assert manager._batch_threads.running == 0
    admissions = sorted(load(store.sessions, item_id).admission for item_id in ids)
    # SQLite's second batch waits for the first's write lock; both commit before stop returns.
    assert admissions == ["admitted", "idle", "idle"]
    assert not [t for t in threading.enumerate() if t.name == "wq-batch"]


# ------------------------------------------------- the worker path, for comparison


def test_a_workers_action_whose_changes_cannot_be_written_is_a_failed_action(
    store: Store,
) -> None:
    """A write the database refuses fails the worker's commit after the action: that
    is the action's failure (counted, audited, backing off), not a lost lease to wait
    out."""
    behaviour = Behaviour()
    step1 = make_executor("step1", behaviour)

    def broken_step1(ctx: ActionContext) -> None:
        step1(ctx)
        ctx.item.lane = None  # type: ignore[assignment]  # NOT NULL

    chain = chain_type(behaviour)
    registry = registry_of(replace(chain, executors={**chain.executors, "step1": broken_step1}))
    config = make_config(store.url, pools=BIG_POOLS)
    (item_id,) = submit_many(store.sessions, registry, config, ["g/p"])
    admit(store, config)
    claim = claim_for_a_worker(store)
    runner = ItemRunner(store.sessions, registry, config.processing, utcnow, threading.Event())
    try:
        runner.run(item_id, claim.token, "w/worker-0")
    finally:
        item = load(store.sessions, item_id)
        assert item.attempts == 1 and "step1" in (item.error or "")
        assert item.lease_token is None  # backing off, not leased until the lease runs out
        assert "action_failed" in audit_types(store.sessions, item_id)
