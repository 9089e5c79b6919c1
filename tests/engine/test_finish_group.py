"""Quick actions' items stored together: one transaction for a worker's group.

A worker leaves an item whose last action only changed its loaded objects in its
group; `ItemRunner.finish` releases the group's items under their fences in one
statement and stores their writes with one commit. Items changed meanwhile or whose
lease was lost go on alone; a group that cannot be stored is handed back, each item
to run alone.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest
from sqlalchemy import event, text, update

from tests.conftest import Store, make_config
from tests.engine.helpers import audit_types, claimed, load, submit
from tests.support.chain import Behaviour, chain_registry
from tests.support.waiting import wait_for
from wq.engine.admission import dispatch
from wq.engine.dimensions import set_dimension
from wq.engine.models import WorkItem, utcnow
from wq.engine.processing import ProcessingManager
from wq.engine.registry import ActionContext, TypeRegistry
from wq.engine.runner import ItemRunner
from wq.engine.workers import WorkerPool


def at_step3(store: Store, registry: TypeRegistry, count: int) -> list[uuid.UUID]:
    """`count` admitted chain items (one per project) with only step3 left to run."""
    config = make_config(store.url)
    ids = []
    for n in range(count):
        item_id = submit(store.sessions, registry, config, f"g/p{n}").item.id  # type: ignore[union-attr]
        with store.sessions.begin() as session:
            found = session.get(WorkItem, item_id)
            set_dimension(session, found, "needs_step1", False)
            set_dimension(session, found, "needs_step2", False)
        ids.append(item_id)
    dispatch(store.sessions, config, clock=utcnow)
    return ids


def new_runner(store: Store, registry: TypeRegistry) -> ItemRunner:
    config = make_config(store.url)
    return ItemRunner(store.sessions, registry, config.processing, utcnow, threading.Event())


def commits_during(store: Store, work: Any) -> int:
    """How many transactions `work()` committed."""
    seen = [0]

    def count(_: Any) -> None:
        seen[0] += 1

    event.listen(store.engine, "commit", count)
    try:
        work()
    finally:
        event.remove(store.engine, "commit", count)
    return seen[0]


def step3_done(store: Store, item_id: uuid.UUID) -> bool:
    item = load(store.sessions, item_id)
    return any(row.dimension == "needs_step3" and row.status == "false" for row in item.statuses)


def test_a_group_is_stored_and_released_in_one_transaction(store: Store) -> None:
    behaviour = Behaviour()
    registry = chain_registry(behaviour)
    ids = at_step3(store, registry, 3)
    runner = new_runner(store, registry)
    group = runner.new_group()
    for claim in claimed(store.sessions, registry, 3):
        assert runner.run(claim.id, claim.token, "me/worker-0", item=claim.item, group=group)
    # Run, not stored yet: still leased, step3 not recorded.
    for item_id in ids:
        assert behaviour.actions_of(item_id) == ["step3"]
        assert load(store.sessions, item_id).lease_token is not None
        assert not step3_done(store, item_id)
    assert commits_during(store, lambda: runner.finish(group)) == 1
    for item_id in ids:
        item = load(store.sessions, item_id)
        assert (item.admission, item.lease_token, item.lease_owner) == ("idle", None, None)
        assert step3_done(store, item_id)
        assert audit_types(store.sessions, item_id)[-2:] == ["action_completed", "released"]
    assert group.held() == []


def test_items_changed_or_taken_meanwhile_go_on_alone_the_others_are_stored(
    store: Store,
) -> None:
    behaviour = Behaviour()
    registry = chain_registry(behaviour)
    plain, changed, lost = at_step3(store, registry, 3)
    runner = new_runner(store, registry)
    group = runner.new_group()
    for claim in claimed(store.sessions, registry, 3):
        assert runner.run(claim.id, claim.token, "me/worker-0", item=claim.item, group=group)
    with store.sessions.begin() as session:
        # An event wants step2 again; another replica took over the third item's lease.
        set_dimension(session, session.get(WorkItem, changed), "needs_step2", True)
        session.execute(
            update(WorkItem)
            .where(WorkItem.id == lost)
            .values(lease_token="someone-else", lease_owner="other")
        )
    runner.finish(group)
    assert load(store.sessions, plain).admission == "idle" and step3_done(store, plain)
    # The changed item: its step3 stored on top of the change, step2 run again, released.
    assert behaviour.actions_of(changed) == ["step3", "step2"]
    assert step3_done(store, changed)
    assert load(store.sessions, changed).admission == "idle"
    assert audit_types(store.sessions, changed).count("released") == 1
    # The lost item: nothing of its action stored, the new owner's lease untouched.
    taken = load(store.sessions, lost)
    assert (taken.admission, taken.lease_token) == ("admitted", "someone-else")
    assert not step3_done(store, lost)
    assert "action_completed" not in audit_types(store.sessions, lost)


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_a_row_another_transaction_holds_holds_up_its_item_and_no_other(store: Store) -> None:
    behaviour = Behaviour()
    registry = chain_registry(behaviour)
    first, held, last = at_step3(store, registry, 3)
    runner = new_runner(store, registry)
    group = runner.new_group()
    for claim in claimed(store.sessions, registry, 3):
        assert runner.run(claim.id, claim.token, "me/worker-0", item=claim.item, group=group)
    failed: list[BaseException] = []

    def finish() -> None:
        try:
            runner.finish(group)
        except BaseException as err:  # reported by the test
            failed.append(err)

    with store.engine.connect() as holder:
        holder.execute(text("SELECT id FROM work_items WHERE id = :id FOR UPDATE"), {"id": held})
        finishing = threading.Thread(target=finish)
        finishing.start()
        # The others are stored and released at once, not after the lock (nor after
        # the statement timeout, 10 s, which would fail the whole group).
        wait_for(
            lambda: all(load(store.sessions, i).admission == "idle" for i in (first, last)),
            timeout=5,
            message="the group's other items stored while one row is held",
        )
        assert load(store.sessions, held).admission == "admitted"
        holder.rollback()
    finishing.join(timeout=15)
    assert not finishing.is_alive() and not failed
    # The held item went on alone once its row was free: its step3 stored, released.
    assert load(store.sessions, held).admission == "idle" and step3_done(store, held)
    assert behaviour.actions_of(held) == ["step3"]
    assert audit_types(store.sessions, held).count("released") == 1


def test_a_group_the_database_refuses_runs_again_each_item_alone(store: Store) -> None:
    behaviour = Behaviour()
    registry = chain_registry(behaviour)
    good, bad, other = at_step3(store, registry, 3)
    plain = registry.get("chain").executors["step3"]

    def step3(ctx: ActionContext) -> None:
        plain(ctx)
        if ctx.item.id == bad:  # a write that cannot be stored
            set_dimension(ctx.session, ctx.item, "needs_step3", False, detail={"x": object()})

    registry.get("chain").executors["step3"] = step3  # type: ignore[index]
    config = make_config(store.url)
    manager = ProcessingManager(store.sessions, registry, config)
    runner = manager._runner
    group = runner.new_group()
    for claim in claimed(store.sessions, registry, 3):
        assert runner.run(claim.id, claim.token, "me/worker-0", item=claim.item, group=group)
    runner.finish(group)
    for item_id in (good, bad, other):  # nothing stored; the slot kept, the lease free
        item = load(store.sessions, item_id)
        assert (item.admission, item.lease_token) == ("admitted", None)
        assert not step3_done(store, item_id)
    manager.run_once()
    wait_for(lambda: manager.busy == 0, message="the workers returned")
    for item_id in (good, other):
        assert behaviour.actions_of(item_id) == ["step3", "step3"]
        assert load(store.sessions, item_id).admission == "idle"
        assert step3_done(store, item_id)
    # Alone, the refused write is the failure of the action that made it.
    failed = load(store.sessions, bad)
    assert failed.attempts == 1 and failed.error
    assert not step3_done(store, bad)


def test_quick_actions_let_one_claim_take_several_items_per_worker(store: Store) -> None:
    behaviour = Behaviour()
    registry = chain_registry(behaviour)
    ids = at_step3(store, registry, 6)
    config = make_config(store.url, processing={"workers": 2})
    manager = ProcessingManager(store.sessions, registry, config)
    manager._handoff.pace = 1.0  # actions of a second: one item per worker
    assert manager.run_once() == 2
    wait_for(lambda: manager.busy == 0, message="the workers returned")
    manager._handoff.pace = 0.001  # quick ones: the line holds more
    assert manager.run_once() == 4
    wait_for(lambda: manager.busy == 0, message="the workers returned")
    for item_id in ids:
        assert load(store.sessions, item_id).admission == "idle"
        assert behaviour.actions_of(item_id) == ["step3"]


def test_a_worker_thread_says_when_its_line_is_empty() -> None:
    done: list[int] = []
    idle: list[tuple[int, int]] = []  # (slot, jobs done when it found the line empty)
    gate = threading.Event()

    def work(job: int, _slot: int) -> None:
        gate.wait(5)
        done.append(job)

    pool: WorkerPool[int] = WorkerPool(work, 1, idle=lambda slot: idle.append((slot, len(done))))
    for job in range(3):
        pool.submit(job)
    gate.set()
    wait_for(lambda: len(idle) == 1, message="the thread found its line empty")
    assert done == [0, 1, 2] and idle == [(0, 3)]
    pool.close()


def test_shutdown_gives_back_at_once_the_items_no_worker_has_started(store: Store) -> None:
    behaviour = Behaviour(sleep={"step3": 2.0})
    registry = chain_registry(behaviour)
    ids = at_step3(store, registry, 4)
    config = make_config(store.url, processing={"workers": 1})
    manager = ProcessingManager(store.sessions, registry, config)
    manager._handoff.pace = 0.001  # quick actions so far: the line holds several
    assert manager.run_once() == 4
    wait_for(lambda: len(behaviour.calls) == 1, message="the first action started")
    (started,) = {item_id for item_id, _ in behaviour.calls}
    waiting = set(ids) - {started}
    stopped: list[list[uuid.UUID]] = []
    stopper = threading.Thread(target=lambda: stopped.append(manager.stop(grace=5)))
    stopper.start()
    # While the first action still runs, the others are free for any replica already.
    wait_for(
        lambda: all(load(store.sessions, i).lease_token is None for i in waiting),
        timeout=1.5,
        message="the waiting items given back before the running action ended",
    )
    assert not step3_done(store, started)
    stopper.join(10)
    assert stopped == [[]] and step3_done(store, started)
    for item_id in waiting:
        item = load(store.sessions, item_id)
        assert (item.admission, item.lease_token) == ("admitted", None)  # slot kept
        assert behaviour.actions_of(item_id) == []


def test_a_stale_worker_returning_does_not_let_go_of_the_claim_made_after_it(
    store: Store,
) -> None:
    # A stalled process whose lease ran out may claim its own item again; the old
    # worker, done at last, must not drop the new claim from what the heartbeat keeps.
    registry = chain_registry(Behaviour())
    manager = ProcessingManager(store.sessions, registry, make_config(store.url))
    handoff = manager._handoff
    item_id = uuid.uuid4()
    with handoff.returned:
        handoff.running[item_id] = "new-token"
    handoff._returned([(item_id, "old-token")])
    assert handoff.running == {item_id: "new-token"}
    handoff._returned([(item_id, "new-token")])
    assert handoff.running == {}
