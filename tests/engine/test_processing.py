"""The processing manager: decider chains, claims, leases, deadlines, failures."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select

from tests.conftest import Store, make_config
from tests.engine.helpers import Listening, audit_types, count_by, load, submit, submit_many
from tests.support.chain import STEPS, Behaviour, chain_registry, chain_type
from tests.support.waiting import wait_for
from wq.engine import items, leases
from wq.engine.events import store_event
from wq.engine.models import AuditEntry, WorkItem, utcnow
from wq.engine.processing import ProcessingManager, backoff_delay
from wq.engine.registry import ActionContext, TypeRegistry
from wq.engine.sweep import sweep_once


def start(
    store: Store,
    managers: list[Any],
    behaviour: Behaviour,
    owner: str | None = None,
    **overrides: Any,
) -> ProcessingManager:
    config = make_config(store.url, **overrides)
    manager = ProcessingManager(store.sessions, chain_registry(behaviour), config, owner=owner)
    manager.start()
    managers.append(manager)
    return manager


def actors_of(store: Store, item_id: Any, event_type: str) -> list[str]:
    with store.sessions() as session:
        return list(
            session.execute(
                select(AuditEntry.actor)
                .where(AuditEntry.work_item_id == item_id, AuditEntry.event_type == event_type)
                .order_by(AuditEntry.id)
            ).scalars()
        )


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

    with manager.sessions.begin() as session:  # the manager's hub hears it
        store_event(session, item_id, "redo", {"why": "test"})
    wait_for(lambda: behaviour.actions_of(item_id).count("step3") == 2, message="step3 again")
    wait_for(lambda: idle(store, item_id), message="idle again")
    again = load(store.sessions, item_id)
    assert again.seq is not None and first.seq is not None and again.seq > first.seq
    assert behaviour.actions_of(item_id) == [*STEPS, "step3"]


def test_every_action_runs_exactly_once_across_workers_and_managers(
    store: Store, managers: list[Any]
) -> None:
    # Actions of 10 ms: with instant ones, on a loaded machine one manager could drain
    # all 900 before the other's next poll, and the test would not show both at work.
    behaviour = Behaviour(sleep=dict.fromkeys(STEPS, 0.01))
    pools = {"default": {"capacity": 1000}}
    # A long lease: on a loaded machine a 5 s lease can lapse between heartbeats, and
    # a takeover (correctly fenced) would run an action twice; that is not this test.
    processing: dict[str, Any] = {"workers": 6, "lease_seconds": 30.0}
    if store.dialect == "postgresql":
        # Like two replicas: each manager has its own hub and hears the other only
        # through NOTIFY. No polling, so a lost wake-up stalls the test.
        processing["poll_interval_seconds"] = 60.0
    first = start(store, managers, behaviour, "first", pools=pools, processing=processing)
    second = start(store, managers, behaviour, "second", pools=pools, processing=processing)
    assert first.wakeup is not second.wakeup
    if store.dialect == "postgresql":
        managers.extend(Listening(store.engine, manager.wakeup) for manager in (first, second))
    ids = submit_many(
        store.sessions, first.registry, first.config, [f"p/{n % 20}" for n in range(300)]
    )
    wait_for(
        lambda: count_by(store.sessions, WorkItem.admission).get("idle") == 300,
        timeout=240,
        interval=0.2,
        message="all 300 items idle",
    )
    counts = behaviour.counts()
    assert len(counts) == 900
    assert set(counts.values()) == {1}
    assert {item_id for item_id, _ in counts} == set(ids)
    with store.sessions() as session:
        actors = set(
            session.execute(
                select(AuditEntry.actor).where(AuditEntry.event_type == "action_completed")
            ).scalars()
        )
    assert {actor.partition("/")[0] for actor in actors} == {"first", "second"}


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
    # Three leases long. Leases of 0.45 s and of 0.9 s lapsed under a loaded machine
    # (the whole suite on two cores; SQLite heartbeats wait for the write lock): 1.5 s
    # leaves a heartbeat (every third of a lease) more slack.
    behaviour = Behaviour(sleep={"step1": 4.5})
    manager = start(store, managers, behaviour, "holder", processing={"lease_seconds": 1.5})
    start(store, managers, behaviour, "rival", processing={"lease_seconds": 1.5})
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
    # The other manager polled all along, yet never took the item over: whichever
    # claimed it first ran all three actions.
    owners = [actor.partition("/")[0] for actor in actors_of(store, item_id, "action_completed")]
    assert len(owners) == 3 and len(set(owners)) == 1 and owners[0] in ("holder", "rival")
    assert "lease_taken_over" not in audit_types(store.sessions, item_id)


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
    # The success after the failures ends them: no attempts left over, no stale error.
    assert (recovered.phase, recovered.attempts, recovered.error) == ("active", 0, None)
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
    # An item that keeps trying through a long outage counts past what a float holds.
    assert backoff_delay(5000, 5.0, 600.0) == 600


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


def test_heartbeats_go_on_through_the_grace_and_nobody_else_runs_the_item(
    store: Store, managers: list[Any]
) -> None:
    # The action outlasts several leases: only heartbeats keep the rival away.
    behaviour = Behaviour(sleep={"step1": 2.0})
    lease = {"lease_seconds": 0.6}
    leaving = start(store, managers, behaviour, processing=lease, owner="leaving")
    item_id = submit(store.sessions, leaving.registry, leaving.config).item.id  # type: ignore[union-attr]
    wait_for(lambda: behaviour.actions_of(item_id), message="step1 running")
    stopper = threading.Thread(target=leaving.stop, kwargs={"grace": 10})
    stopper.start()
    start(store, managers, behaviour, processing=lease, owner="rival")
    stopper.join(timeout=15)
    assert not stopper.is_alive()
    wait_for(lambda: idle(store, item_id), message="the rival finishes the item")
    # step1 ran once, to its end, and was handed over only then.
    assert behaviour.actions_of(item_id) == list(STEPS)
    assert actors_of(store, item_id, "action_completed") == [
        "leaving/worker-0",
        "rival/worker-0",
        "rival/worker-0",
    ]
    assert "lease_taken_over" not in audit_types(store.sessions, item_id)


def test_past_the_grace_a_running_action_keeps_its_lease(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    behaviour = Behaviour(sleep={"step1": 3.0})
    config = make_config(store.url, processing={"lease_seconds": 2.0})
    registry = chain_registry(behaviour)
    item_id = submit(store.sessions, registry, config).item.id  # type: ignore[union-attr]
    manager = ProcessingManager(store.sessions, registry, config, owner="leaving")
    manager.start()
    wait_for(lambda: behaviour.actions_of(item_id), message="step1 running")
    began = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="wq.engine.processing"):
        leftovers = manager.stop(grace=0.3)
    # The grace is a bound (generous here: the machine is loaded).
    assert time.monotonic() - began < 0.3 + 1.5
    assert leftovers == [item_id]
    assert str(item_id) in caplog.text and "step1" in caplog.text
    # Not handed over early: the lease is still the running action's.
    held = load(store.sessions, item_id)
    assert held.lease_owner == "leaving" and held.leased_until is not None
    assert held.leased_until > utcnow()
    # Once the action ends, its own worker commits it and lets go of the lease.
    wait_for(lambda: load(store.sessions, item_id).lease_token is None, message="handed back")
    handed_back = load(store.sessions, item_id)
    assert handed_back.admission == "admitted"
    assert "action_completed" in audit_types(store.sessions, item_id)
    assert behaviour.actions_of(item_id) == ["step1"]


def test_a_manager_that_stops_claims_nothing_more(store: Store) -> None:
    behaviour = Behaviour(sleep={"step1": 1.0})
    config = make_config(store.url)
    registry = chain_registry(behaviour)
    first = submit(store.sessions, registry, config).item.id  # type: ignore[union-attr]
    manager = ProcessingManager(store.sessions, registry, config)
    manager.start()
    wait_for(lambda: behaviour.actions_of(first), message="step1 running")
    manager.stop(grace=5)
    later = submit(store.sessions, registry, config, "p/later").item.id  # type: ignore[union-attr]
    assert manager.run_once(projects=None) == 0
    assert load(store.sessions, later).lease_token is None
    assert behaviour.actions_of(first) == ["step1"]
    assert load(store.sessions, first).lease_token is None  # handed back after step1


def test_events_for_terminal_items_are_discarded(store: Store, managers: list[Any]) -> None:
    behaviour = Behaviour()
    manager = start(store, managers, behaviour)
    item_id = submit(store.sessions, manager.registry, manager.config).item.id  # type: ignore[union-attr]
    wait_for(lambda: idle(store, item_id), message="idle")
    with manager.sessions.begin() as session:  # the manager's hub hears it
        store_event(session, item_id, "cancel", {})
    wait_for(lambda: load(store.sessions, item_id).phase == "cancelled", message="cancelled")
    assert load(store.sessions, item_id).admission == "done"
    with manager.sessions.begin() as session:  # the manager's hub hears it
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

    admitted = dispatch(store.sessions, config, clock=utcnow)
    assert sorted(entry.project for entry in admitted) == ["p/a", "p/b"]
    now = utcnow()
    with store.sessions.begin() as session:
        first = leases.claim(
            session,
            owner="a",
            limit=10,
            types=["chain"],
            now=now,
            lease_until=now + timedelta(seconds=30),
        )
    with store.sessions.begin() as session:
        second = leases.claim(
            session,
            owner="b",
            limit=10,
            types=["chain"],
            now=now,
            lease_until=now + timedelta(seconds=30),
        )
    assert len(first) == 2 and second == []
    # A manager finds nothing to admit or claim either: every admitted item is leased.
    assert manager.run_once(projects=None) == 0
    with store.sessions() as session:
        owners = session.execute(select(WorkItem.lease_owner).order_by(WorkItem.seq)).scalars()
        assert list(owners) == ["a", None, "a"]


def test_transient_failures_days_apart_with_a_success_between_never_add_up(
    store: Store, managers: list[Any]
) -> None:
    days_later = timedelta()

    def clock() -> datetime:
        return utcnow() + days_later

    behaviour = Behaviour(fail_times={"step2": 1})
    config = make_config(store.url, processing={"max_attempts": 2})
    manager = ProcessingManager(store.sessions, chain_registry(behaviour), config, clock=clock)
    manager.start()
    managers.append(manager)
    item_id = submit(store.sessions, manager.registry, config).item.id  # type: ignore[union-attr]
    wait_for(lambda: idle(store, item_id), message="recovered from the first failure")
    assert (load(store.sessions, item_id).attempts, load(store.sessions, item_id).error) == (
        0,
        None,
    )

    days_later = timedelta(days=3)
    behaviour.fail_times["step3"] = 1
    with manager.sessions.begin() as session:  # the manager's hub hears it
        store_event(session, item_id, "redo", {"why": "days later"})
    wait_for(
        lambda: behaviour.actions_of(item_id).count("step3") == 3, message="step3 failed, rerun"
    )
    wait_for(lambda: idle(store, item_id), message="recovered from the second failure")
    item = load(store.sessions, item_id)
    assert (item.phase, item.attempts, item.error) == ("active", 0, None)
    assert audit_types(store.sessions, item_id).count("action_failed") == 2


def test_an_expired_lease_is_taken_over_when_it_runs_out_and_audited(
    store: Store, managers: list[Any]
) -> None:
    behaviour = Behaviour()
    config = make_config(store.url)
    registry = chain_registry(behaviour)
    item_id = submit(store.sessions, registry, config).item.id  # type: ignore[union-attr]
    from wq.engine.admission import dispatch

    dispatch(store.sessions, config, clock=utcnow)
    # A replica died holding the lease; it runs out in a second.
    expiry = utcnow() + timedelta(seconds=1)
    with store.sessions.begin() as session:
        session.execute(
            WorkItem.__table__.update()
            .where(WorkItem.id == item_id)
            .values(lease_owner="dead-host:1", lease_token="dead", leased_until=expiry)
        )
    # A quiet system: no poll for a minute, nothing signalled. Only the known expiry
    # can wake the claim in time.
    start(store, managers, behaviour, owner="rescuer", processing={"poll_interval_seconds": 60})
    wait_for(lambda: idle(store, item_id), timeout=20, message="the rescuer finishes the item")
    with store.sessions() as session:
        takeovers = (
            session.execute(
                select(AuditEntry).where(
                    AuditEntry.work_item_id == item_id,
                    AuditEntry.event_type == "lease_taken_over",
                )
            )
            .scalars()
            .all()
        )
        assert len(takeovers) == 1
        assert takeovers[0].actor == "rescuer"
        assert (takeovers[0].old_state or {})["lease_owner"] == "dead-host:1"
    assert behaviour.actions_of(item_id) == list(STEPS)


def test_past_the_grace_a_lease_outlives_the_exit_by_the_request_timeout(store: Store) -> None:
    # A call the exiting process made may be in flight until its client's timeout
    # (a git push GitLab is still processing): no replica may take over before then.
    behaviour = Behaviour(sleep={"step1": 3.0})
    config = make_config(store.url, processing={"lease_seconds": 2.0})
    registry = TypeRegistry()
    registry.register_type(dataclasses.replace(chain_type(behaviour), request_timeout_seconds=30.0))
    item_id = submit(store.sessions, registry, config).item.id  # type: ignore[union-attr]
    manager = ProcessingManager(store.sessions, registry, config, owner="leaving")
    manager.start()
    wait_for(lambda: behaviour.actions_of(item_id), message="step1 running")
    assert manager.stop(grace=0.3) == [item_id]
    held = load(store.sessions, item_id)
    assert held.lease_owner == "leaving" and held.leased_until is not None
    assert held.leased_until > utcnow() + timedelta(seconds=25)
    wait_for(lambda: load(store.sessions, item_id).lease_token is None, message="handed back")
