"""The processing manager: decider chains, claims, leases, deadlines, failures."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from sqlalchemy import select

from tests.conftest import Store, make_config
from tests.engine.helpers import audit_types, count_by, load, submit, submit_many
from tests.support.chain import STEPS, Behaviour, chain_registry
from tests.support.waiting import wait_for
from wq.engine import items
from wq.engine import store as store_ops
from wq.engine.events import store_event
from wq.engine.models import AuditEntry, WorkItem, utcnow
from wq.engine.processing import ProcessingManager, backoff_delay
from wq.engine.registry import ActionContext
from wq.engine.sweep import sweep_once


def start(
    store: Store, managers: list[Any], behaviour: Behaviour, **overrides: Any
) -> ProcessingManager:
    config = make_config(store.url, **overrides)
    manager = ProcessingManager(store.sessions, chain_registry(behaviour), config)
    manager.start()
    managers.append(manager)
    return manager


def idle(store: Store, item_id: Any) -> bool:
    return load(store.sessions, item_id).admission == "idle"


def test_decider_chain_runs_in_order_then_idles_and_an_event_requeues(
    store: Store, managers: list[Any]
) -> None:
    behaviour = Behaviour()
    manager = start(store, managers, behaviour)
    item_id = submit(store.sessions, manager.registry, manager.config).item.id  # type: ignore[union-attr]
    wait_for(lambda: idle(store, item_id), message="item idle")
    assert behaviour.actions_of(item_id) == list(STEPS)
    first = load(store.sessions, item_id)
    assert first.phase == "active" and first.lease_token is None
    assert [row.status for row in first.statuses] == ["false", "false", "false"]
    trail = audit_types(store.sessions, item_id)
    assert trail[:3] == ["created", "queued", "admitted"]
    assert trail.count("action_completed") == 3 and trail[-1] == "released"

    with store.sessions.begin() as session:
        store_event(session, item_id, "redo", {"why": "test"})
    wait_for(lambda: behaviour.actions_of(item_id).count("step3") == 2, message="step3 again")
    wait_for(lambda: idle(store, item_id), message="idle again")
    again = load(store.sessions, item_id)
    assert again.seq is not None and first.seq is not None and again.seq > first.seq
    assert behaviour.actions_of(item_id) == [*STEPS, "step3"]


def test_every_action_runs_exactly_once_across_workers_and_managers(
    store: Store, managers: list[Any]
) -> None:
    behaviour = Behaviour()
    pools = {"default": {"capacity": 1000}}
    # A long lease: on a loaded machine a 5 s lease can lapse between heartbeats, and
    # a takeover (correctly fenced) would run an action twice; that is not this test.
    processing = {"workers": 6, "lease_seconds": 30.0}
    first = start(store, managers, behaviour, pools=pools, processing=processing)
    second = start(store, managers, behaviour, pools=pools, processing=processing)
    assert first.owner == second.owner  # same process; the lease tokens still differ
    ids = submit_many(
        store.sessions, first.registry, first.config, [f"p/{n % 20}" for n in range(1000)]
    )
    wait_for(
        lambda: count_by(store.sessions, WorkItem.admission).get("idle") == 1000,
        timeout=120,
        interval=0.2,
        message="all 1000 items idle",
    )
    counts = behaviour.counts()
    assert len(counts) == 3000
    assert set(counts.values()) == {1}
    assert {item_id for item_id, _ in counts} == set(ids)


def test_abandoned_lease_is_reclaimed_and_finished_once(store: Store, managers: list[Any]) -> None:
    behaviour = Behaviour(sleep={"step1": 0.5})
    config = make_config(store.url)
    registry = chain_registry(behaviour)
    item_id = submit(store.sessions, registry, config).item.id  # type: ignore[union-attr]
    dying = ProcessingManager(store.sessions, registry, config)
    dying.run_once()
    wait_for(lambda: behaviour.actions_of(item_id), message="step1 running")
    # The worker "dies" mid-action: its lease is abandoned (here: taken from it).
    expiry = utcnow() + timedelta(seconds=0.3)
    with store.sessions.begin() as session:
        session.execute(
            WorkItem.__table__.update()
            .where(WorkItem.id == item_id)
            .values(lease_owner="dead-host:1", lease_token="dead", leased_until=expiry)
        )
    wait_for(lambda: dying.busy == 0, message="the fenced-out worker gives up")
    assert load(store.sessions, item_id).lease_owner == "dead-host:1"
    assert "action_completed" not in audit_types(store.sessions, item_id)

    behaviour.sleep.clear()
    wait_for(lambda: utcnow() > expiry, message="lease expiry")
    report = sweep_once(store.sessions, registry, config)
    assert report.leases_reclaimed == 1
    assert "lease_expired" in audit_types(store.sessions, item_id)
    start(store, managers, behaviour)
    wait_for(lambda: idle(store, item_id), message="item finished by a live worker")
    # Only the abandoned action runs again; every action commits exactly once.
    assert behaviour.actions_of(item_id) == ["step1", "step1", "step2", "step3"]
    assert audit_types(store.sessions, item_id).count("action_completed") == 3


def test_heartbeat_keeps_a_long_action_leased(store: Store, managers: list[Any]) -> None:
    behaviour = Behaviour(sleep={"step1": 1.5})
    manager = start(store, managers, behaviour, processing={"lease_seconds": 0.45})
    rival = start(store, managers, behaviour, processing={"lease_seconds": 0.45})
    item_id = submit(store.sessions, manager.registry, manager.config).item.id  # type: ignore[union-attr]
    wait_for(lambda: behaviour.actions_of(item_id), message="step1 started")
    seen = set()
    while not behaviour.actions_of(item_id)[1:]:
        leased_until = load(store.sessions, item_id).leased_until
        if leased_until is not None:
            seen.add(leased_until)
        time.sleep(0.02)  # a tight loop of SQLite write transactions would starve the heartbeat
    assert len(seen) >= 3, "the lease was extended while the action ran"
    wait_for(lambda: idle(store, item_id), message="idle")
    assert behaviour.actions_of(item_id) == list(STEPS)
    assert rival is not manager


def test_deadline_returns_the_worker_to_other_items(store: Store, managers: list[Any]) -> None:
    behaviour = Behaviour(sleep={step: 0.3 for step in STEPS})
    config = make_config(store.url, processing={"workers": 1, "deadline_seconds": 0.1})
    registry = chain_registry(behaviour)
    slow = submit(store.sessions, registry, config, "p/slow").item.id  # type: ignore[union-attr]
    manager = ProcessingManager(store.sessions, registry, config)
    manager.run_once()  # the only worker takes the slow item
    wait_for(lambda: behaviour.actions_of(slow), message="slow item started")
    behaviour.sleep.clear()
    quick = submit(store.sessions, registry, config, "p/quick").item.id  # type: ignore[union-attr]
    manager.start()
    managers.append(manager)
    wait_for(lambda: idle(store, quick) and idle(store, slow), message="both idle")
    order = [(item_id, action) for item_id, action in behaviour.calls]
    assert order.index((quick, "step1")) < order.index((slow, "step3"))
    assert behaviour.actions_of(slow) == list(STEPS)


def test_failures_back_off_then_fail_and_retry_brings_the_item_back(
    store: Store, managers: list[Any]
) -> None:
    behaviour = Behaviour(fail_times={"step2": 2})
    manager = start(store, managers, behaviour, processing={"max_attempts": 3})
    item_id = submit(store.sessions, manager.registry, manager.config).item.id  # type: ignore[union-attr]
    wait_for(lambda: idle(store, item_id), message="recovered after two failures")
    recovered = load(store.sessions, item_id)
    assert recovered.phase == "active" and recovered.attempts == 2
    assert recovered.error == "step2: RuntimeError: step2 failed on purpose"
    assert behaviour.actions_of(item_id) == ["step1", "step2", "step2", "step2", "step3"]
    assert audit_types(store.sessions, item_id).count("action_failed") == 2

    behaviour.fail_times["step1"] = 100
    doomed = submit(store.sessions, manager.registry, manager.config, "p/doomed").item.id  # type: ignore[union-attr]
    wait_for(lambda: load(store.sessions, doomed).phase == "failed", message="failed")
    failed = load(store.sessions, doomed)
    assert (failed.attempts, failed.admission) == (3, "done")
    assert "step1 failed on purpose" in (failed.error or "")
    assert behaviour.actions_of(doomed) == ["step1"] * 3

    behaviour.fail_times.clear()
    with store.sessions.begin() as session:
        items.retry(session, doomed, registry=manager.registry, now=utcnow(), actor="tester")
    wait_for(lambda: idle(store, doomed), message="retried item idle")
    back = load(store.sessions, doomed)
    assert (back.phase, back.attempts, back.error) == ("active", 0, None)
    assert "retried" in audit_types(store.sessions, doomed)


def test_backoff_grows_and_is_capped() -> None:
    assert [backoff_delay(n, 5, 600) for n in (1, 2, 3, 4)] == [5, 10, 20, 40]
    assert backoff_delay(20, 5, 600) == 600


def test_failed_action_waits_for_its_backoff(store: Store) -> None:
    behaviour = Behaviour(fail_times={"step1": 1})
    config = make_config(
        store.url, processing={"backoff_base_seconds": 60.0, "backoff_max_seconds": 600.0}
    )
    registry = chain_registry(behaviour)
    item_id = submit(store.sessions, registry, config).item.id  # type: ignore[union-attr]
    manager = ProcessingManager(store.sessions, registry, config)
    manager.run_once()
    wait_for(lambda: load(store.sessions, item_id).attempts == 1, message="first failure")
    wait_for(lambda: manager.busy == 0, message="worker free")
    item = load(store.sessions, item_id)
    assert item.run_after is not None and item.run_after > utcnow() + timedelta(seconds=50)
    assert item.admission == "admitted"  # keeps its slot while it backs off
    assert manager.run_once() == 0  # not claimable before run_after


def test_an_executor_that_commits_is_a_failure(store: Store) -> None:
    config = make_config(store.url)
    registry = chain_registry(Behaviour())

    def rude(ctx: ActionContext) -> None:
        ctx.session.commit()

    registry.get("chain").executors["step1"] = rude  # type: ignore[index]
    item_id = submit(store.sessions, registry, config).item.id  # type: ignore[union-attr]
    manager = ProcessingManager(store.sessions, registry, config)
    manager.run_once()
    wait_for(lambda: load(store.sessions, item_id).attempts == 1, message="recorded failure")
    assert "must not commit" in (load(store.sessions, item_id).error or "")


def test_stop_releases_leases_of_unfinished_actions(store: Store) -> None:
    behaviour = Behaviour(sleep={"step1": 1.0})
    config = make_config(store.url)
    registry = chain_registry(behaviour)
    item_id = submit(store.sessions, registry, config).item.id  # type: ignore[union-attr]
    manager = ProcessingManager(store.sessions, registry, config)
    manager.start()
    wait_for(lambda: behaviour.actions_of(item_id), message="step1 running")
    manager.stop(grace=0.1)
    item = load(store.sessions, item_id)
    assert item.lease_token is None and item.admission == "admitted"


def test_events_for_terminal_items_are_discarded(store: Store, managers: list[Any]) -> None:
    behaviour = Behaviour()
    manager = start(store, managers, behaviour)
    item_id = submit(store.sessions, manager.registry, manager.config).item.id  # type: ignore[union-attr]
    wait_for(lambda: idle(store, item_id), message="idle")
    with store.sessions.begin() as session:
        store_event(session, item_id, "cancel", {})
    wait_for(lambda: load(store.sessions, item_id).phase == "cancelled", message="cancelled")
    assert load(store.sessions, item_id).admission == "done"
    with store.sessions.begin() as session:
        store_event(session, item_id, "redo", {})
    wait_for(lambda: not _pending_events(store), message="event drained")
    assert behaviour.actions_of(item_id) == list(STEPS)  # nothing ran for it


def _pending_events(store: Store) -> int:
    from wq.engine.models import PendingEvent

    with store.sessions() as session:
        return len(session.execute(select(PendingEvent.id)).all())


def test_sweep_queues_items_whose_deferral_came_due(store: Store) -> None:
    behaviour = Behaviour()
    config = make_config(store.url)
    registry = chain_registry(behaviour)
    item_id = submit(store.sessions, registry, config).item.id  # type: ignore[union-attr]
    manager = ProcessingManager(store.sessions, registry, config)
    manager.run_once()
    wait_for(lambda: idle(store, item_id), message="idle")
    due = utcnow() + timedelta(seconds=0.2)
    with store.sessions.begin() as session:
        item = session.get(WorkItem, item_id)
        assert item is not None
        from wq.engine.dimensions import set_dimension

        set_dimension(session, item, "needs_step2", True, pending_until=due)
    assert sweep_once(store.sessions, registry, config).deferrals_due == 0
    wait_for(lambda: utcnow() > due, message="deferral due")
    assert sweep_once(store.sessions, registry, config).deferrals_due == 1
    assert load(store.sessions, item_id).admission == "queued"
    manager.run_once(projects=None)
    wait_for(lambda: idle(store, item_id), message="idle again")
    assert behaviour.actions_of(item_id) == [*STEPS, "step2"]
    with store.sessions() as session:
        reasons = (
            session.execute(select(AuditEntry.trigger).where(AuditEntry.event_type == "queued"))
            .scalars()
            .all()
        )
    assert {"source": "sweep", "reason": "pending_until expired"} in reasons


def test_claim_skips_leased_and_unadmitted_items(store: Store) -> None:
    config = make_config(store.url, pools={"default": {"capacity": 1}})
    registry = chain_registry(Behaviour())
    submit_many(store.sessions, registry, config, ["p/a", "p/a", "p/b"])
    manager = ProcessingManager(store.sessions, registry, config)
    from wq.engine.admission import dispatch

    admitted = dispatch(store.sessions, config, now=utcnow())
    assert sorted(entry.project for entry in admitted) == ["p/a", "p/b"]
    now = utcnow()
    with store.sessions.begin() as session:
        first = store_ops.claim(
            session,
            owner="a",
            limit=10,
            types=["chain"],
            now=now,
            lease_until=now + timedelta(seconds=30),
        )
    with store.sessions.begin() as session:
        second = store_ops.claim(
            session,
            owner="b",
            limit=10,
            types=["chain"],
            now=now,
            lease_until=now + timedelta(seconds=30),
        )
    assert len(first) == 2 and second == []
    assert manager.busy == 0
