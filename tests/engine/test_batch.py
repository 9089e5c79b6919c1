"""Claimed batches: cheap actions on the scheduler thread, one transaction per batch."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from dataclasses import replace
from datetime import timedelta
from typing import Any

from sqlalchemy import select, update

from tests.conftest import Store, make_config
from tests.engine.helpers import audit_types, load, submit_many
from tests.support.chain import STEPS, Behaviour, chain_registry, chain_type, make_executor
from tests.support.waiting import wait_for
from wq.engine import store as store_ops
from wq.engine.admission import dispatch
from wq.engine.batch import BatchRunner
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
    dispatch(store.sessions, config, now=utcnow())
    return ids


def claim(store: Store, owner: str, limit: int) -> list[store_ops.Claim]:
    now = utcnow()
    with store.sessions.begin() as session:
        return store_ops.claim(
            session,
            owner=owner,
            limit=limit,
            types=["chain"],
            now=now,
            lease_until=now + timedelta(seconds=30),
        )


def batch_runner(store: Store, registry: TypeRegistry, config: Config) -> BatchRunner:
    return BatchRunner(store.sessions, registry, config.processing, utcnow)


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
    wait_for(
        lambda: all(load(store.sessions, item_id).admission == "idle" for item_id in ids),
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


def test_a_batch_claim_never_hands_one_item_to_two_claimers(store: Store) -> None:
    config = make_config(store.url, pools=BIG_POOLS)
    registry = chain_registry(Behaviour(), cheap=True)
    ids = admitted_batch(store, registry, config, 40)
    results: list[list[store_ops.Claim]] = [[], [], []]
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
    wait_for(
        lambda: all(load(store.sessions, item_id).admission == "idle" for item_id in ids),
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


def test_a_fenced_out_batch_writes_nothing_for_the_items_it_lost(store: Store) -> None:
    behaviour = Behaviour()
    config = make_config(store.url, pools=BIG_POOLS)
    registry = chain_registry(behaviour, cheap=True)
    admitted_batch(store, registry, config, 6)
    claims = claim(store, "old", 6)
    lost = {c.id for c in claims[:4]}
    with store.sessions.begin() as session:  # another replica took these over
        session.execute(
            update(WorkItem).where(WorkItem.id.in_(lost)).values(lease_token="someone-else")
        )
    handoff = batch_runner(store, registry, config).run(claims, "old/batch")
    assert handoff == []
    completed = events_of(store, "action_completed")
    assert not (set(completed) & lost)  # nothing of the lost items was written
    assert {item_id for item_id, _ in behaviour.calls} == {c.id for c in claims[4:]}
    for item_id in lost:
        item = load(store.sessions, item_id)
        assert item.lease_token == "someone-else" and item.admission == "admitted"
        assert item.statuses == []
    for claim_ in claims[4:]:
        assert load(store.sessions, claim_.id).admission == "idle"


def test_an_exception_in_one_item_keeps_the_others_work(store: Store) -> None:
    behaviour = Behaviour(fail_times={"step2": 1})
    config = make_config(store.url, pools=BIG_POOLS)
    registry = chain_registry(behaviour, cheap=True)
    ids = admitted_batch(store, registry, config, 5)
    claims = claim(store, "me", 5)
    assert batch_runner(store, registry, config).run(claims, "me/batch") == []
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
            assert completed[item_id] == 1  # step1 committed, step2 failed
        else:
            assert completed[item_id] == 3 and released[item_id] == 1
            assert load(store.sessions, item_id).admission == "idle"


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
    dispatch(store.sessions, config, now=utcnow())
    claims = claim(store, "me", 2)
    assert [claim_.id for claim_ in claims] == [first]
    assert batch_runner(store, registry, config).run(claims, "me/batch") == []
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
    dispatch(store.sessions, config, now=utcnow())
    assert load(store.sessions, second).admission == "admitted"


def test_an_action_that_is_not_cheap_goes_to_a_worker_with_its_lease(store: Store) -> None:
    behaviour = Behaviour()
    config = make_config(store.url, pools=BIG_POOLS)
    registry = TypeRegistry()
    registry.register_type(
        replace(chain_type(behaviour, cheap=True), cheap_actions=frozenset({"step1"}))
    )
    admitted_batch(store, registry, config, 3)
    claims = claim(store, "me", 3)
    handoff = batch_runner(store, registry, config).run(claims, "me/batch")
    assert sorted(c.id for c in handoff) == sorted(c.id for c in claims)
    assert sorted(behaviour.calls) == sorted((c.id, "step1") for c in claims)
    for claim_ in claims:
        item = load(store.sessions, claim_.id)
        assert item.lease_token == claim_.token and item.admission == "admitted"


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
    claims: list[int] = []
    real_claim = store_ops.claim

    def counted(*args: Any, **kwargs: Any) -> list[store_ops.Claim]:
        found = real_claim(*args, **kwargs)
        claims.append(len(found))
        return found

    monkeypatch.setattr(store_ops, "claim", counted)
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
