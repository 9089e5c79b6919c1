"""Claimed batches: cheap actions on the scheduler thread, one transaction per batch."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select

from tests.conftest import Store, make_config
from tests.engine.helpers import audit_types, load, submit_many, wait_idle
from tests.support.chain import STEPS, Behaviour, chain_registry, chain_type, make_executor
from tests.support.waiting import wait_for
from wq.engine import batch as batch_module
from wq.engine import leases
from wq.engine.admission import dispatch
from wq.engine.batch import BatchRunner, Taken
from wq.engine.config import Config
from wq.engine.models import AuditEntry, WorkItem, utcnow
from wq.engine.processing import ProcessingManager
from wq.engine.registry import ActionContext, TypeRegistry

BIG_POOLS = {"default": {"capacity": 1000, "alert_capacity": 1}}


def admitted_batch(
    store: Store, registry: TypeRegistry, config: Config, count: int
) -> list[uuid.UUID]:
    """`count` chain items over a few projects, all admitted."""
    ids = submit_many(store.sessions, registry, config, [f"g/p{n % 3}" for n in range(count)])
    dispatch(store.sessions, config, clock=utcnow)
    return ids


def claim(store: Store, owner: str, limit: int) -> list[leases.Claim]:
    now = utcnow()
    with store.sessions.begin() as session:
        return leases.claim(
            session,
            owner=owner,
            limit=limit,
            types=["chain"],
            now=now,
            lease_until=now + timedelta(seconds=30),
        )


def batch_runner(store: Store, registry: TypeRegistry, config: Config) -> BatchRunner:
    return BatchRunner(store.sessions, registry, config.processing, utcnow)


def take(store: Store, registry: TypeRegistry, config: Config, owner: str, limit: int) -> Taken:
    return batch_runner(store, registry, config).take(owner, limit=limit)


def count_claims(monkeypatch: Any, *functions: str) -> list[int]:
    """How many items each call of these `wq.engine.leases` claim functions took."""
    taken: list[int] = []
    for name in functions:
        real = getattr(leases, name)

        def counted(*args: Any, _real: Any = real, **kwargs: Any) -> Any:
            found = _real(*args, **kwargs)
            taken.append(len(found))
            return found

        monkeypatch.setattr(leases, name, counted)
    return taken


def events_of(store: Store, event_type: str) -> Counter[uuid.UUID]:
    with store.sessions() as session:
        rows = session.execute(
            select(AuditEntry.work_item_id).where(AuditEntry.event_type == event_type)
        ).scalars()
        return Counter(item_id for item_id in rows if item_id is not None)


def test_cheap_actions_run_in_the_batch_with_the_same_audit_trail(
    store: Store, managers: list[Any]
) -> None:
    behaviour = Behaviour()
    config = make_config(store.url, pools=BIG_POOLS)
    registry = chain_registry(behaviour, cheap=True)
    manager = ProcessingManager(store.sessions, registry, config, owner="solo")
    ids = submit_many(store.sessions, registry, config, [f"g/p{n % 4}" for n in range(25)])
    manager.start()
    managers.append(manager)
    wait_idle(
        store.sessions,
        ids,
        message="all idle",
    )
    assert behaviour.counts() == Counter({(i, step): 1 for i in ids for step in STEPS})
    for item_id in ids:
        assert audit_types(store.sessions, item_id) == [
            "created",
            "queued",
            "admitted",
            "action_completed",
            "action_completed",
            "action_completed",
            "released",
        ]
        item = load(store.sessions, item_id)
        assert item.lease_token is None and [row.status for row in item.statuses] == ["false"] * 3
    with store.sessions() as session:
        actors = set(
            session.execute(
                select(AuditEntry.actor).where(AuditEntry.event_type == "action_completed")
            ).scalars()
        )
    assert actors == {"solo/batch"}  # no worker thread was involved


def test_racing_batches_never_take_one_item_twice(store: Store) -> None:
    behaviour = Behaviour()
    config = make_config(store.url, pools=BIG_POOLS)
    registry = chain_registry(behaviour, cheap=True)
    ids = admitted_batch(store, registry, config, 40)
    taken: list[int] = [0, 0, 0]
    barrier = threading.Barrier(3)

    def race(index: int) -> None:
        barrier.wait()
        while result := take(store, registry, config, f"replica-{index}", 5).taken:
            taken[index] += result

    threads = [threading.Thread(target=race, args=(index,)) for index in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sum(taken) == 40
    assert behaviour.counts() == Counter({(i, step): 1 for i in ids for step in STEPS})
    assert events_of(store, "released") == Counter(dict.fromkeys(ids, 1))


def test_a_batch_claim_never_hands_one_item_to_two_claimers(store: Store) -> None:
    config = make_config(store.url, pools=BIG_POOLS)
    registry = chain_registry(Behaviour(), cheap=True)
    ids = admitted_batch(store, registry, config, 40)
    results: list[list[leases.Claim]] = [[], [], []]
    barrier = threading.Barrier(3)

    def race(index: int) -> None:
        barrier.wait()
        results[index] = claim(store, f"replica-{index}", 20)

    threads = [threading.Thread(target=race, args=(index,)) for index in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    claimed = [c.id for result in results for c in result]
    assert len(claimed) == len(set(claimed)) == 40  # each item once, none left over
    assert set(claimed) == set(ids)
    with store.sessions() as session:
        owners = dict(session.execute(select(WorkItem.id, WorkItem.lease_owner)).all())
    for index, result in enumerate(results):
        assert {owners[c.id] for c in result} <= {f"replica-{index}"}


def test_two_managers_running_batches_run_every_action_once(
    store: Store, managers: list[Any]
) -> None:
    behaviour = Behaviour()
    config = make_config(store.url, pools=BIG_POOLS)
    registry = chain_registry(behaviour, cheap=True)
    ids = submit_many(store.sessions, registry, config, [f"g/p{n % 5}" for n in range(60)])
    for owner in ("one", "two"):
        manager = ProcessingManager(store.sessions, registry, config, owner=owner)
        manager.start()
        managers.append(manager)
    wait_idle(
        store.sessions,
        ids,
        message="all idle",
    )
    assert behaviour.counts() == Counter({(i, step): 1 for i in ids for step in STEPS})
    assert events_of(store, "released") == Counter(dict.fromkeys(ids, 1))


def test_batches_run_beside_the_scheduler_and_stop_waits_for_them(
    store: Store, managers: list[Any]
) -> None:
    """Batches run on threads of their own, at most two at once; stop lets them end."""
    behaviour = Behaviour(sleep={"step1": 0.3})
    config = make_config(store.url, pools=BIG_POOLS, processing={"batch_size": 2})
    registry = chain_registry(behaviour, cheap=True)
    ids = submit_many(store.sessions, registry, config, [f"g/p{n}" for n in range(6)])
    manager = ProcessingManager(store.sessions, registry, config, owner="solo")
    manager.start()
    managers.append(manager)
    wait_for(lambda: behaviour.calls, message="a batch started")
    assert manager.stop(grace=10) == []
    assert not [t for t in threading.enumerate() if t.name == "wq-batch"]
    # Every batch that began has committed all of its work: no item is half-done, and
    # no item was claimed twice.
    started = {item_id for item_id, _ in behaviour.calls}
    assert len(started) >= 2
    for item_id in ids:
        item = load(store.sessions, item_id)
        assert item.lease_token is None
        if item_id in started:
            assert item.admission == "idle" and behaviour.actions_of(item_id) == list(STEPS)
        else:
            assert item.admission == "admitted" and item.statuses == []


def test_a_batch_leaves_alone_what_another_holds(store: Store) -> None:
    """Leased to a worker, or (PostgreSQL) locked by another replica's open batch."""
    behaviour = Behaviour()
    config = make_config(store.url, pools=BIG_POOLS)
    registry = chain_registry(behaviour, cheap=True)
    ids = admitted_batch(store, registry, config, 6)
    leased = {claim_.id for claim_ in claim(store, "worker", 2)}
    postgres = store.engine.dialect.name == "postgresql"
    with store.sessions() as other:
        locked: set[uuid.UUID] = set()
        if postgres:  # SQLite's batches take the write lock: one at a time anyway
            rest = [item_id for item_id in ids if item_id not in leased][:2]
            other.execute(select(WorkItem.id).where(WorkItem.id.in_(rest)).with_for_update())
            locked = set(rest)
        result = take(store, registry, config, "me", 10)
        other.rollback()
    free = set(ids) - leased - locked
    assert result.taken == len(free) and result.handoff == []
    assert {item_id for item_id, _ in behaviour.calls} == free
    for item_id in leased | locked:
        item = load(store.sessions, item_id)
        assert item.admission == "admitted" and item.statuses == []
        assert item.lease_owner == ("worker" if item_id in leased else None)
    for item_id in free:
        assert load(store.sessions, item_id).admission == "idle"


def test_a_batch_that_fails_to_commit_writes_nothing(store: Store, monkeypatch: Any) -> None:
    """The row locks are the batch's fence: nothing of a batch that did not commit stays."""
    behaviour = Behaviour()
    config = make_config(store.url, pools=BIG_POOLS)
    registry = chain_registry(behaviour, cheap=True)
    ids = admitted_batch(store, registry, config, 4)

    def refuse(*_: Any, **__: Any) -> None:
        raise RuntimeError("the connection went away")

    monkeypatch.setattr(batch_module, "release_slots", refuse)
    with pytest.raises(RuntimeError):
        take(store, registry, config, "me", 4)
    # The actions ran (twice: the batch tries again an action at a time, to find one
    # whose writes are refused) ...
    assert len(behaviour.calls) == 2 * 4 * len(STEPS)
    for item_id in ids:  # ... and nothing of theirs is stored
        item = load(store.sessions, item_id)
        assert item.admission == "admitted" and item.statuses == [] and item.lease_token is None
    assert not events_of(store, "action_completed")


def test_an_exception_in_one_item_keeps_the_others_work(store: Store) -> None:
    behaviour = Behaviour(fail_times={"step2": 1})
    config = make_config(store.url, pools=BIG_POOLS)
    registry = chain_registry(behaviour, cheap=True)
    ids = admitted_batch(store, registry, config, 5)
    result = take(store, registry, config, "me", 5)
    assert (result.taken, result.handoff) == (5, [])
    failed = events_of(store, "action_failed")
    assert len(failed) == 1 and sum(failed.values()) == 1
    (failing,) = failed
    released = events_of(store, "released")
    completed = events_of(store, "action_completed")
    for item_id in ids:
        if item_id == failing:
            item = load(store.sessions, item_id)
            assert item.attempts == 1 and item.error is not None and "step2" in item.error
            assert item.admission == "admitted" and item.lease_token is None
            assert item.run_after is not None  # backing off, keeps its slot
            assert result.due == item.run_after  # when the scheduler must look again
            assert completed[item_id] == 1  # step1 committed, step2 failed
        else:
            assert completed[item_id] == 3 and released[item_id] == 1
            assert load(store.sessions, item_id).admission == "idle"


def test_a_failure_is_counted_when_another_thread_s_batch_takes_the_item_first(
    store: Store, monkeypatch: Any
) -> None:
    """A failed action's batch rolls back and takes its items again; a batch of another
    thread that takes the item in between counts the failure (it ran the action
    again, the failure lost, once on a loaded machine)."""
    behaviour = Behaviour(fail_times={"step1": 1})
    config = make_config(store.url, pools=BIG_POOLS)
    registry = chain_registry(behaviour, cheap=True)
    (item_id,) = admitted_batch(store, registry, config, 1)
    runner = batch_runner(store, registry, config)
    real_lock = leases.lock_claimable
    others: list[Taken] = []

    def lock_claimable(session: Any, **kwargs: Any) -> Any:
        if kwargs.get("among") is not None and not others:
            # Between the failed try and the next: another thread's batch.
            other = threading.Thread(target=lambda: others.append(runner.take("b", limit=5)))
            other.start()
            other.join()
        return real_lock(session, **kwargs)

    monkeypatch.setattr(leases, "lock_claimable", lock_claimable)
    runner.take("a", limit=5)
    assert [taken.taken for taken in others] == [1]
    assert behaviour.actions_of(item_id) == ["step1"]  # not run again meanwhile
    item = load(store.sessions, item_id)
    assert item.attempts == 1 and item.error is not None and "step1" in item.error
    assert sum(events_of(store, "action_failed").values()) == 1


def test_an_item_finished_in_the_batch_is_done_and_frees_its_slot_for_the_next(
    store: Store,
) -> None:
    behaviour = Behaviour()
    finish = make_executor("step2", behaviour)

    def step2_completes(ctx: ActionContext) -> None:
        finish(ctx)
        ctx.item.phase = "completed"

    chain = chain_type(behaviour, cheap=True)
    registry = TypeRegistry()
    registry.register_type(replace(chain, executors={**chain.executors, "step2": step2_completes}))
    # One slot in the project: the second item waits in line behind the first.
    config = make_config(store.url, pools={"default": {"capacity": 1, "alert_capacity": 0}})
    first, second = submit_many(store.sessions, registry, config, ["g/p", "g/p"])
    dispatch(store.sessions, config, clock=utcnow)
    assert take(store, registry, config, "me", 2).taken == 1  # only the first was admitted
    done = load(store.sessions, first)
    assert (done.phase, done.admission) == ("completed", "done")
    assert done.lease_token is None and done.lease_owner is None and done.leased_until is None
    assert audit_types(store.sessions, first)[-3:] == [
        "action_completed",
        "action_completed",
        "released",
    ]
    assert behaviour.actions_of(first) == ["step1", "step2"]  # nothing after the end
    # The freed slot goes to the next in line.
    dispatch(store.sessions, config, clock=utcnow)
    assert load(store.sessions, second).admission == "admitted"


def test_an_action_that_is_not_cheap_goes_to_a_worker_with_its_lease(store: Store) -> None:
    behaviour = Behaviour()
    config = make_config(store.url, pools=BIG_POOLS)
    registry = TypeRegistry()
    registry.register_type(
        replace(chain_type(behaviour, cheap=True), cheap_actions=frozenset({"step1"}))
    )
    ids = admitted_batch(store, registry, config, 3)
    handoff = take(store, registry, config, "me", 3).handoff
    assert sorted(c.id for c in handoff) == sorted(ids)
    assert sorted(behaviour.calls) == sorted((item_id, "step1") for item_id in ids)
    for claim_ in handoff:
        item = load(store.sessions, claim_.id)
        assert item.lease_token == claim_.token and item.lease_owner == "me"
        assert item.admission == "admitted" and item.leased_until is not None


def test_items_waiting_for_a_busy_worker_are_not_claimed_over_and_over(
    store: Store, managers: list[Any], monkeypatch: Any
) -> None:
    """Handed-off items beyond the free workers are given back, and not re-claimed at once.

    step1 is cheap, step2 is slow and runs on the only worker: the other items wait. The
    scheduler must not spin claiming and giving them back while the worker is busy.
    """
    behaviour = Behaviour(sleep={"step2": 1.5})
    config = make_config(
        store.url,
        pools=BIG_POOLS,
        processing={"workers": 1, "poll_interval_seconds": 0.2, "batch_size": 2},
    )
    registry = TypeRegistry()
    registry.register_type(
        replace(chain_type(behaviour, cheap=True), cheap_actions=frozenset({"step1"}))
    )
    ids = submit_many(store.sessions, registry, config, [f"g/p{n}" for n in range(5)])
    claims = count_claims(monkeypatch, "claim", "lock_claimable")
    manager = ProcessingManager(store.sessions, registry, config, owner="solo")
    manager.start()
    managers.append(manager)
    wait_for(
        lambda: (
            "step2" in behaviour.actions_of(ids[0])
            or any("step2" in behaviour.actions_of(i) for i in ids)
        ),
        message="a step2 started",
    )
    before = len(claims)
    time.sleep(1.0)  # the worker is busy with step2 all along
    # About one pass per poll interval (0.2 s), not a claim loop.
    assert len(claims) - before <= 20, len(claims) - before
    assert all(len(behaviour.actions_of(i)) <= 3 for i in ids)


def test_an_idle_scheduler_takes_no_batches_in_a_loop(
    store: Store, managers: list[Any], monkeypatch: Any
) -> None:
    """With nothing to take, a batch wakes nobody: about one pass per poll interval."""
    config = make_config(store.url, processing={"poll_interval_seconds": 0.2})
    registry = chain_registry(Behaviour(), cheap=True)
    batches = count_claims(monkeypatch, "lock_claimable")
    manager = ProcessingManager(store.sessions, registry, config, owner="solo")
    manager.start()
    managers.append(manager)
    time.sleep(1.0)
    assert 1 <= len(batches) <= 10, len(batches)
    assert set(batches) == {0}
