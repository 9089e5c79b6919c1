"""What wakes the scheduler, and what a pass then does: no pass that can only find nothing.

At low rates every item used to cost extra passes: its admission woke the scheduler
that had just claimed it, and its release woke it for an admission pass that admitted
nothing, each followed by a claim and a batch that found nothing (a quarter of the
round trips per item at 20 items/s). Work must still never wait for the poll, nor
must an item put back in the queue until its wait ends.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.exc import OperationalError

from tests.conftest import Store, make_config
from tests.engine.helpers import Listening, load, submit, submit_many
from tests.support.chain import STEPS, Behaviour, chain_registry, chain_type, make_executor
from tests.support.waiting import wait_for
from wq.engine.batch import BatchRunner
from wq.engine.config import Config
from wq.engine.models import AuditEntry
from wq.engine.processing import ProcessingManager
from wq.engine.registry import ActionContext, TypeRegistry
from wq.engine.wakeup import ITEMS_ADMITTED, WAKEUP_KEY, Wakeup, quiet, signal

POOLS = {"default": {"capacity": 1, "alert_capacity": 1}}


def counted_batches(monkeypatch: Any) -> list[int]:
    """How many items each batch took, in order."""
    taken: list[int] = []
    real = BatchRunner.take

    def take(self: BatchRunner, *args: Any, **kwargs: Any) -> Any:
        result = real(self, *args, **kwargs)
        taken.append(result.taken)
        return result

    monkeypatch.setattr(BatchRunner, "take", take)
    return taken


def test_one_item_at_a_time_costs_one_batch_and_waits_for_no_poll(
    store: Store, managers: list[Any], monkeypatch: Any
) -> None:
    # Capacity 1: the second item waits queued until the first is released, and is
    # then admitted by the pass its release wakes (the poll is a minute away).
    config = make_config(store.url, pools=POOLS, processing={"poll_interval_seconds": 60.0})
    registry = chain_registry(Behaviour(), cheap=True)
    manager = ProcessingManager(store.sessions, registry, config, owner="solo")
    batches = counted_batches(monkeypatch)
    manager.start()
    managers.append(manager)
    wait_for(lambda: batches, message="the first pass")
    time.sleep(0.2)
    batches.clear()

    first, second = submit_many(manager.sessions, registry, config, ["g/p", "g/p"])
    for item_id in (first, second):
        wait_for(lambda i=item_id: load(store.sessions, i).admission == "idle", message="idle")
    time.sleep(0.3)  # any pass still to come
    # Each item's batch, and no batch that found nothing (its admission's own wake-up,
    # the release's admission pass that admitted nothing).
    assert [n for n in batches if n] == [1, 1]
    assert batches.count(0) <= 1  # at most a pass racing a batch still holding its row

    # A submission to a project at capacity admits nothing and takes no batch.
    blocker = submit(manager.sessions, registry, config, "g/q").item
    assert blocker is not None
    wait_for(lambda: load(store.sessions, blocker.id).admission == "idle", message="idle")
    time.sleep(0.3)
    before = len(batches)
    with manager.sessions.begin() as session:  # hold g/q's slot: admitted, never claimed
        item = session.get(type(blocker), blocker.id)
        assert item is not None
        item.admission, item.phase = "admitted", "completed"
    submit(manager.sessions, registry, config, "g/q")
    time.sleep(0.3)
    assert len(batches) == before


POLL = {"poll_interval_seconds": 60.0, "lease_seconds": 60.0}
# Well under the poll interval: only a wake-up gets the work done in time.
PROMPT = 8.0


class StartGate:
    """An executor that says it started, then waits until the test opens the gate."""

    def __init__(self, behaviour: Behaviour, step: str) -> None:
        self.started = threading.Event()
        self.go = threading.Event()
        self._run = make_executor(step, behaviour)

    def __call__(self, ctx: ActionContext) -> None:
        self.started.set()
        assert self.go.wait(20)
        self._run(ctx)


def idle_soon(store: Store, item_id: uuid.UUID, what: str) -> None:
    wait_for(
        lambda: load(store.sessions, item_id).admission == "idle", timeout=PROMPT, message=what
    )


def started(manager: ProcessingManager, managers: list[Any]) -> ProcessingManager:
    manager.start()
    managers.append(manager)
    return manager


def failing_when_set(real: Callable[..., Any]) -> tuple[Callable[..., Any], threading.Event]:
    """`real`, and the event that makes its next call fail as a dropped connection
    would (the event is cleared by that call)."""
    fail_next = threading.Event()

    def call(*args: Any, **kwargs: Any) -> Any:
        if fail_next.is_set():
            fail_next.clear()
            raise OperationalError("SELECT ...", {}, Exception("server closed the connection"))
        return real(*args, **kwargs)

    return call, fail_next


def test_what_a_failed_batch_leaves_is_taken_again_soon_not_at_the_poll(
    store: Store, managers: list[Any]
) -> None:
    """The pass that admits an item does not wake its own scheduler: its batch takes
    the item. When that batch fails (a deadlock, a dropped connection: a database
    error escapes `take`), a pass looks again a second later, not at the poll."""
    config = make_config(store.url, processing=POLL)
    registry = chain_registry(Behaviour(), cheap=True)
    manager = ProcessingManager(store.sessions, registry, config, owner="solo")
    manager._batch.take, fail_next = failing_when_set(manager._batch.take)  # type: ignore[method-assign]
    started(manager, managers)
    time.sleep(0.5)  # the first pass is over
    fail_next.set()
    intake = submit(manager.sessions, registry, config, "g/p")
    assert intake.item is not None
    idle_soon(store, intake.item.id, "the item after its first batch failed")


def test_after_a_failed_pass_the_next_comes_soon_not_at_the_poll(
    store: Store, managers: list[Any]
) -> None:
    """A pass that fails (the database gone for a moment) is followed by another
    within a second, not by a wait of the whole poll interval: work submitted as the
    database comes back runs at once."""
    config = make_config(store.url, processing=POLL)
    registry = chain_registry(Behaviour())
    manager = ProcessingManager(store.sessions, registry, config, owner="solo")
    scheduler = manager._scheduler
    scheduler._pass, fail_next = failing_when_set(scheduler._pass)  # type: ignore[method-assign]
    started(manager, managers)
    time.sleep(0.5)  # the first pass is over
    fail_next.set()
    manager.wakeup.poke()  # a pass, which fails
    wait_for(lambda: not fail_next.is_set(), timeout=5, message="the pass failed")
    intake = submit(manager.sessions, registry, config, "g/p")
    assert intake.item is not None
    idle_soon(store, intake.item.id, "the item submitted after the failed pass")


@pytest.mark.parametrize("cheap", [False, True], ids=["worker", "batch"])
def test_a_requeued_item_is_admitted_again_when_its_wait_ends_not_at_the_poll(
    store: Store, managers: list[Any], cheap: bool
) -> None:
    """An action that cannot begin (its runner down) gives the slot back: the item
    waits in the queue, where admission skips it until its wait ends. The process that
    requeued it passes over its project then."""
    behaviour = Behaviour(requeue_times={"step1": 1}, requeue_seconds=0.5)
    registry = chain_registry(behaviour, cheap=cheap)
    # The longest backoff above the wait asked for: it bounds what an action may ask.
    backoff = {"backoff_base_seconds": 0.1, "backoff_max_seconds": 1.0}
    config = make_config(store.url, processing={**POLL, **backoff})
    manager = started(ProcessingManager(store.sessions, registry, config), managers)
    intake = submit(manager.sessions, registry, config, "g/p")
    assert intake.item is not None
    idle_soon(store, intake.item.id, "the item admitted again after its 0.5 s wait")

    assert behaviour.actions_of(intake.item.id) == ["step1", *STEPS]
    with store.sessions() as session:
        trail = session.execute(
            select(AuditEntry.event_type, AuditEntry.at)
            .where(AuditEntry.work_item_id == intake.item.id)
            .order_by(AuditEntry.id)
        ).all()
    kinds = [kind for kind, _ in trail]
    # The whole trail on a failure: once, on a loaded machine, it had no requeue.
    assert "requeued" in kinds, kinds
    requeued = kinds.index("requeued")
    assert kinds[requeued + 1] == "admitted"  # queued meanwhile, without a slot
    assert (trail[requeued + 1].at - trail[requeued].at).total_seconds() >= 0.5


def test_a_backoff_a_batch_sees_while_the_scheduler_works_out_its_wait_is_not_missed(
    store: Store, managers: list[Any]
) -> None:
    """A background batch stores when its work comes due and pokes the scheduler only
    if that is before the end of the scheduler's current wait. A batch that ends
    while the scheduler works out that wait must poke too, or the scheduler sleeps
    the whole poll interval. The test widens that window (a few bytecodes) by holding
    `_wait_seconds` until the batch has ended."""
    behaviour = Behaviour(fail_times={"step1": 1})  # a backoff of 1 s, the item admitted
    registry = chain_registry(behaviour, cheap=True)
    config = make_config(
        store.url,
        processing={**POLL, "backoff_base_seconds": 1.0, "backoff_max_seconds": 1.0},
    )
    intake = submit(store.sessions, registry, config, "g/p")  # the first pass finds it
    assert intake.item is not None
    manager = ProcessingManager(store.sessions, registry, config, owner="solo")
    batch_ended = threading.Event()
    real_run_batch, real_wait_seconds = manager._batch_threads.run, manager._scheduler._wait_seconds

    def run_batch(*, background: bool) -> int:
        try:
            return real_run_batch(background=background)
        finally:
            batch_ended.set()

    def wait_seconds() -> float:
        wait = real_wait_seconds()
        batch_ended.wait(5)  # the first batch ends between the two
        return wait

    manager._batch_threads.run = run_batch  # type: ignore[method-assign]
    manager._scheduler._wait_seconds = wait_seconds  # type: ignore[method-assign]
    started(manager, managers)
    idle_soon(store, intake.item.id, "the item retried after its 1 s backoff")


def test_quiet_does_not_outlive_its_transaction(store: Store) -> None:
    """`quiet()` marks one transaction: a later transaction of the same session that
    admits work wakes its own hub again."""
    hub = Wakeup()
    sessions = store.sessions
    with sessions(info={WAKEUP_KEY: hub}) as session:
        with session.begin():
            quiet(session, ITEMS_ADMITTED)
            signal(session, ITEMS_ADMITTED)
        assert not hub.wait(0).claim
        with session.begin():
            signal(session, ITEMS_ADMITTED)  # not quiet: its own scheduler must hear it
        assert hub.wait(0).claim


# ------------------------------------------------- two replicas (PostgreSQL)


@pytest.fixture
def replicas(postgres_store: Store) -> Iterator[list[Any]]:
    """Managers and listeners a test started; stopped at its end."""
    running: list[Any] = []
    yield running
    for thing in reversed(running):
        thing.stop(grace=2)


def replica(
    store: Store, registry: TypeRegistry, config: Config, owner: str, running: list[Any]
) -> ProcessingManager:
    manager = ProcessingManager(store.sessions, registry, config, owner=owner)
    running.append(Listening(store.engine, manager.wakeup))
    manager.start()
    running.append(manager)
    return manager


def test_an_item_a_stopping_replica_hands_back_is_taken_by_the_other_at_once(
    postgres_store: Store, replicas: list[Any]
) -> None:
    """On stop a worker hands its item back between actions and tells the other
    replicas: one idle with a free worker takes it at once, not at its poll."""
    store = postgres_store
    behaviour = Behaviour()
    gate = StartGate(behaviour, "step2")
    item_type = chain_type(behaviour)
    registry = TypeRegistry()
    registry.register_type(replace(item_type, executors={**item_type.executors, "step2": gate}))
    config = make_config(store.url, processing={**POLL, "workers": 1})
    leaving = replica(store, registry, config, "leaving", replicas)
    intake = submit(store.sessions, registry, config, "g/p")
    assert intake.item is not None
    assert gate.started.wait(10)
    replica(store, registry, config, "staying", replicas)
    time.sleep(0.5)  # its first pass found the item leased
    stopping = threading.Thread(target=leaving.stop, kwargs={"grace": 10})
    stopping.start()
    try:
        wait_for(lambda: leaving._stopping.is_set(), message="stop begun")
        gate.go.set()  # step2 ends; step3 is handed back
        idle_soon(store, intake.item.id, "the other replica to run step3")
        assert behaviour.actions_of(intake.item.id) == ["step1", "step2", "step3"]
    finally:
        gate.go.set()
        stopping.join(15)
