"""One-transaction batches (issue 17): what a user would notice when something goes wrong.

Each test pins what a user would notice: an item that cannot be processed must not
hold up the others, a scheduler must not spin while its workers are busy, a ready
item must not wait behind work that became ready after it, and audit rows say what
was written.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import update

from tests.conftest import Store, make_config
from tests.engine.helpers import audit_types, load, submit_many, wait_idle
from tests.engine.test_batch_review_guards import (
    Gate,
    admit,
    claim_for_a_worker,
    events_of,
    registry_of,
    runner_of,
    steps_type,
    submit_models,
    three_passes,
)
from tests.support.chain import Behaviour, chain_type, decide, make_executor
from tests.support.waiting import wait_for
from wq.engine import leases
from wq.engine.models import WorkItem, utcnow
from wq.engine.processing import ProcessingManager
from wq.engine.registry import ActionContext, Decision, Wait
from wq.engine.runner import ItemRunner

BIG_POOLS = {"default": {"capacity": 1000, "alert_capacity": 1}}


class OtherItem(WorkItem):
    """A second test type beside `chain` (same steps), for mixed registries."""

    __mapper_args__ = {"polymorphic_identity": "review2_other"}  # noqa: RUF012


def count_calls(monkeypatch: Any, name: str) -> list[int]:
    """One entry per call of `wq.engine.leases.<name>`."""
    calls: list[int] = []
    real = getattr(leases, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(leases, name, counted)
    return calls


# ------------------------------------------------- one item must not stall a batch


def test_a_decider_that_raises_for_one_item_does_not_stall_the_others(store: Store) -> None:
    """A decider that raises (a bad detail row, a bug for one item's data) fails the
    whole batch transaction; the same items are taken again in the same order, so the
    other items never get done (before b358a5b they went to workers instead)."""
    behaviour = Behaviour()
    poison: set[uuid.UUID] = set()

    def decider(item: WorkItem, now: datetime) -> Decision:
        if item.id in poison:
            raise KeyError("a detail this decider needs is missing")
        return decide(item, now)

    config = make_config(store.url, pools=BIG_POOLS)
    registry = registry_of(replace(chain_type(behaviour, cheap=True), decider=decider))
    ids = submit_many(store.sessions, registry, config, [f"g/p{n}" for n in range(4)])
    admit(store, config)
    poison.add(ids[0])
    runner = runner_of(store, registry, config)
    for _ in range(3):  # three scheduler passes
        try:
            runner.take("me", limit=10)
        except Exception:
            continue
    stuck = [item_id for item_id in ids[1:] if load(store.sessions, item_id).admission != "idle"]
    assert stuck == [], f"{len(stuck)} of 3 healthy items never processed"


def test_an_action_whose_changes_cannot_be_written_does_not_stall_the_others(
    store: Store,
) -> None:
    """A cheap action's changes are flushed only at the batch's end: a write the
    database refuses fails every attempt of the batch, not that item's action (a
    worker flushes inside the action's try and records a failure)."""
    behaviour = Behaviour()
    bad: set[uuid.UUID] = set()
    step1 = make_executor("step1", behaviour)

    def broken_step1(ctx: ActionContext) -> None:
        step1(ctx)
        if ctx.item.id in bad:
            ctx.item.lane = None  # type: ignore[assignment]  # NOT NULL

    chain = chain_type(behaviour, cheap=True)
    registry = registry_of(replace(chain, executors={**chain.executors, "step1": broken_step1}))
    config = make_config(store.url, pools=BIG_POOLS)
    ids = submit_many(store.sessions, registry, config, [f"g/p{n}" for n in range(4)])
    admit(store, config)
    bad.add(ids[0])
    three_passes(runner_of(store, registry, config))
    stuck = [item_id for item_id in ids[1:] if load(store.sessions, item_id).admission != "idle"]
    assert stuck == [], f"{len(stuck)} of 3 healthy items never processed"


class NulError(RuntimeError):
    """An error whose text holds NUL (say, quoted from an answer or an input)."""


def nul_step1(ctx: ActionContext) -> None:
    raise NulError("unexpected answer: 'a\x00b'")


def test_a_failed_action_whose_message_holds_nul_is_recorded_by_a_worker(store: Store) -> None:
    """319e961 keeps NUL out of audit rows, but the same message goes into
    work_items.error in the same transaction: on PostgreSQL the failure (and its
    audit row) is lost, the attempt is never counted, and the item is retried after
    every lease period forever."""
    behaviour = Behaviour()
    chain = chain_type(behaviour)
    registry = registry_of(replace(chain, executors={**chain.executors, "step1": nul_step1}))
    config = make_config(store.url, pools=BIG_POOLS)
    (item_id,) = submit_many(store.sessions, registry, config, ["g/p"])
    admit(store, config)
    claim = claim_for_a_worker(store)
    runner = ItemRunner(store.sessions, registry, config.processing, utcnow, threading.Event())
    runner.run(item_id, claim.token, "w/worker-0")
    item = load(store.sessions, item_id)  # (SQLite keeps the NUL in the item's error)
    assert item.attempts == 1 and "NulError" in (item.error or "")
    assert item.lease_token is None and item.run_after is not None  # backing off
    assert "action_failed" in audit_types(store.sessions, item_id)


def test_a_failed_cheap_action_whose_message_holds_nul_does_not_stall_its_batch(
    store: Store,
) -> None:
    """The batch's retry records the failure in the batch transaction: on PostgreSQL
    its commit fails, and so does every later batch that takes these items."""
    behaviour = Behaviour()
    chain = chain_type(behaviour, cheap=True)
    bad: set[uuid.UUID] = set()
    step1 = make_executor("step1", behaviour)

    def maybe_nul(ctx: ActionContext) -> None:
        if ctx.item.id in bad:
            nul_step1(ctx)
        step1(ctx)

    registry = registry_of(replace(chain, executors={**chain.executors, "step1": maybe_nul}))
    config = make_config(store.url, pools=BIG_POOLS)
    ids = submit_many(store.sessions, registry, config, [f"g/p{n}" for n in range(3)])
    admit(store, config)
    bad.add(ids[0])
    three_passes(runner_of(store, registry, config))
    failing = load(store.sessions, ids[0])
    assert failing.attempts >= 1 and "NulError" in (failing.error or "")
    assert [load(store.sessions, item_id).admission for item_id in ids[1:]] == ["idle", "idle"]


# ------------------------------------------------- the takeover audit


def test_a_takeover_handed_to_a_worker_audits_its_new_lease(store: Store) -> None:
    """A batch that takes over an expired lease and hands the item to a worker leases
    it in the same transaction, yet `lease_taken_over` says `leased_until: null`."""
    behaviour = Behaviour()
    chain = chain_type(behaviour, cheap=True)
    registry = registry_of(replace(chain, cheap_actions=frozenset({"step1"})))
    config = make_config(store.url, pools=BIG_POOLS)
    (item_id,) = submit_many(store.sessions, registry, config, ["g/p"])
    admit(store, config)
    with store.sessions.begin() as session:
        session.execute(
            update(WorkItem)
            .where(WorkItem.id == item_id)
            .values(
                lease_owner="dead:1",
                lease_token="gone",
                leased_until=utcnow() - timedelta(seconds=1),
            )
        )
    taken = runner_of(store, registry, config).take("me", limit=5)
    assert [claim.id for claim in taken.handoff] == [item_id]
    item = load(store.sessions, item_id)
    assert item.lease_owner == "me" and item.leased_until is not None
    (row,) = events_of(store, "lease_taken_over")
    assert row.old_state is not None and row.old_state["lease_owner"] == "dead:1"
    assert row.new_state is not None and row.new_state["lease_owner"] == "me"
    assert row.new_state.get("leased_until") is not None, row.new_state


# ------------------------------------------------- mixed registries


def test_a_busy_worker_pool_does_not_make_the_scheduler_spin(
    store: Store, managers: list[Any], monkeypatch: Any
) -> None:
    """The worker claim's next due time is kept while no worker is free: once it has
    passed, the scheduler waits 0 s between passes until a worker returns.

    A worker-only item backs off (its end becomes the worker claim's due time); a
    batch hands a cheap type's item to the only worker meanwhile; when the backoff is
    over, nothing refreshes that due time (the claim returns early with no free worker).
    """
    behaviour = Behaviour()
    gate = Gate(behaviour, "step2")
    chain = chain_type(behaviour, cheap=True)
    mixed = replace(
        chain, cheap_actions=frozenset({"step1"}), executors={**chain.executors, "step2": gate}
    )
    registry = registry_of(mixed, steps_type("review2_other", OtherItem, behaviour, frozenset()))
    config = make_config(
        store.url,
        pools=BIG_POOLS,
        processing={"workers": 1, "poll_interval_seconds": 0.5, "lease_seconds": 30.0},
    )
    (cheap_item,) = submit_many(store.sessions, registry, config, ["g/p"])
    (other,) = submit_models(store, registry, config, OtherItem, 1)
    admit(store, config)
    backoff_ends = utcnow() + timedelta(seconds=1)
    with store.sessions.begin() as session:
        session.execute(update(WorkItem).where(WorkItem.id == other).values(run_after=backoff_ends))
    passes = count_calls(monkeypatch, "lock_claimable")
    manager = ProcessingManager(store.sessions, registry, config, owner="solo")
    manager.start()
    managers.append(manager)
    try:
        wait_for(lambda: manager.busy == 1, message="the cheap item's step2 on the worker")
        assert behaviour.actions_of(other) == []
        time.sleep(max(0.0, (backoff_ends - utcnow()).total_seconds()) + 0.3)
        before = len(passes)
        time.sleep(1.0)
        during = len(passes) - before
    finally:
        gate.go.set()
    # About two passes per second (the poll interval), not a loop.
    assert during <= 10, f"{during} batch passes in 1 s while the only worker was busy"
    assert load(store.sessions, cheap_item).phase == "active"


def test_a_cheap_types_item_that_needs_a_worker_is_not_starved_by_later_work(
    store: Store, managers: list[Any]
) -> None:
    """Every pass gives the free workers to types without cheap actions first; a
    batch's hand-off then finds none free and is given back. An item that was ready
    first waits until that backlog is gone (before b358a5b one claim in ready order)."""
    behaviour = Behaviour(sleep={"step1": 0.15})
    chain = chain_type(behaviour, cheap=True)
    mixed = replace(
        chain,
        cheap_actions=frozenset({"step1"}),
        executors={**chain.executors, "step1": make_executor("step1", Behaviour())},
    )
    registry = registry_of(mixed, steps_type("review2_other", OtherItem, behaviour, frozenset()))
    config = make_config(store.url, pools=BIG_POOLS, processing={"workers": 1})
    (first,) = submit_many(store.sessions, registry, config, ["g/p"])
    admit(store, config)  # ready first
    time.sleep(0.01)
    later = submit_models(store, registry, config, OtherItem, 3)
    admit(store, config)
    manager = ProcessingManager(store.sessions, registry, config, owner="solo")
    manager.start()
    managers.append(manager)
    wait_for(
        lambda: load(store.sessions, first).admission == "idle",
        message="the first item done",
    )
    starts = [(item_id, action) for item_id, action in behaviour.calls if action == "step1"]
    starts += [(first, "step2")]
    order = [item_id for item_id, action in behaviour.calls if (item_id, action) in starts]
    # Done before the last of the later items even started, or at least before it.
    assert later[-1] not in order or order.index(first) < order.index(later[-1]), (
        "the item ready first waited behind every item that became ready after it"
    )


def test_a_hold_in_a_full_batch_is_checked_when_its_wait_is_over(
    store: Store, managers: list[Any]
) -> None:
    """Items a full batch holds (a decider's `Wait`, or a failed action's backoff) are
    checked again after the poll interval (60 s here), not when their wait is over
    (0.2 s): a full batch reads no next due time, so it wakes nobody at its end, and
    the batch started next (by its early wake-up) finds the due time after the
    scheduler has computed its wait, and, having taken nothing, wakes nobody either.
    (The batches race: it fails in most runs, not all.)"""
    behaviour = Behaviour()
    held: set[uuid.UUID] = set()

    def hold_first(item: WorkItem, now: datetime) -> Decision:
        if item.id not in held:
            held.add(item.id)
            return Wait(now + timedelta(seconds=0.2))
        return decide(item, now)

    config = make_config(
        store.url,
        pools=BIG_POOLS,
        processing={"batch_size": 2, "poll_interval_seconds": 60.0, "lease_seconds": 60.0},
    )
    registry = registry_of(replace(chain_type(behaviour, cheap=True), decider=hold_first))
    ids = submit_many(store.sessions, registry, config, ["g/a", "g/b"])  # one full batch
    held.clear()  # (submit asked the decider)
    manager = ProcessingManager(store.sessions, registry, config, owner="solo")
    manager.start()
    managers.append(manager)
    wait_idle(
        store.sessions,
        ids,
        timeout=5,
        message="the held items checked again once their wait was over",
    )
