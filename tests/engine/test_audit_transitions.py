"""Each kind of transition leaves an audit entry by the field conventions.

Conventions (the work-queue-service spec's, as `wq.engine.audit` states them): `actor`
is the caller for API entries, the worker for worker entries, the engine part
(`dispatcher`, `sweep`, `system`) otherwise; `old_state` is left out on creation;
`old_state` and `new_state` carry the same keys and never a None; `trigger` always has
a `source`, with `action` for deliberate operations and `reason` for system and error
transitions. Auth decisions are checked in tests/daemon/auth/test_http.py.
"""

from __future__ import annotations

import re
import uuid
from datetime import timedelta
from typing import Any

from sqlalchemy import select, update

from tests.conftest import Store, make_config
from tests.engine.helpers import load
from tests.support.chain import Behaviour, chain_registry, new_chain_item
from tests.support.waiting import wait_for
from wq.engine import items
from wq.engine.events import drain_events, store_event
from wq.engine.models import AuditEntry, WorkItem, utcnow
from wq.engine.processing import ProcessingManager
from wq.engine.sweep import sweep_once

OWNER = "host-a:1"
WORKER = re.compile(rf"^{OWNER}/worker-\d+$")
ITEM_KEYS = {"phase", "admission", "lane", "seq", "project"}


def entries(store: Store, item_id: uuid.UUID) -> list[AuditEntry]:
    with store.sessions() as session:
        found = session.scalars(
            select(AuditEntry).where(AuditEntry.work_item_id == item_id).order_by(AuditEntry.id)
        ).all()
        session.expunge_all()
        return list(found)


def check_conventions(entry: AuditEntry) -> None:
    """What holds for every entry, whatever its kind."""
    assert entry.actor, entry.event_type
    assert entry.trigger and entry.trigger.get("source"), entry.event_type
    for part in (entry.old_state, entry.new_state, entry.trigger, entry.extra):
        assert part is None or None not in part.values(), (entry.event_type, part)
    if entry.old_state is not None and entry.new_state is not None:
        assert set(entry.old_state) == set(entry.new_state), entry.event_type


def state(entry: AuditEntry, side: str) -> dict[str, Any]:
    value = entry.old_state if side == "old" else entry.new_state
    assert value is not None, (entry.event_type, side)
    return value


def test_an_items_life_from_submission_to_retry_is_audited_by_the_conventions(
    store: Store, managers: list[Any]
) -> None:
    behaviour = Behaviour(fail_times={"step2": 1})
    config = make_config(store.url)
    registry = chain_registry(behaviour)
    manager = ProcessingManager(store.sessions, registry, config, owner=OWNER)
    with store.sessions.begin() as session:
        intake = items.submit(
            session,
            new_chain_item("group/project"),
            registry=registry,
            pool=config.pool_for("group/project"),
            now=utcnow(),
            actor="ocp:alice",
            trigger={"source": "api", "action": "submit"},
        )
        assert intake.item is not None
        item_id = intake.item.id
    manager.start()
    managers.append(manager)
    wait_for(lambda: load(store.sessions, item_id).admission == "idle", message="idle")
    manager.stop(grace=2)

    log = entries(store, item_id)
    for entry in log:
        check_conventions(entry)
    kinds = [entry.event_type for entry in log]
    assert kinds == [
        "created",
        "queued",
        "admitted",
        "action_completed",
        "action_failed",  # the item keeps its slot through its backoff
        "action_completed",
        "action_completed",
        "released",
    ]
    created, queued, admitted, step1, failed, _, step3, released = log

    # API intake: the caller, no old state, the type in metadata.
    assert (created.actor, created.old_state, created.trigger) == (
        "ocp:alice",
        None,
        {"source": "api", "action": "submit"},
    )
    assert set(state(created, "new")) == ITEM_KEYS
    assert state(created, "new")["phase"] == "active"
    assert created.extra == {"type": "chain"}
    assert (queued.actor, queued.old_state) == ("ocp:alice", None)

    # The dispatcher: a system transition with its reason.
    assert admitted.actor == "dispatcher"
    assert admitted.trigger == {"source": "dispatcher", "reason": "slot free"}
    assert (state(admitted, "old")["admission"], state(admitted, "new")["admission"]) == (
        "queued",
        "admitted",
    )

    # Worker actions: the worker's name, the action as the trigger.
    assert WORKER.match(step1.actor)
    assert step1.trigger == {"source": "worker", "action": "step1"}
    assert WORKER.match(failed.actor)
    assert failed.trigger is not None
    assert (failed.trigger["source"], failed.trigger["action"]) == ("worker", "step2")
    assert "step2 failed on purpose" in failed.trigger["error"]
    assert failed.trigger["retry_in_seconds"] > 0
    assert (state(failed, "old")["attempts"], state(failed, "new")["attempts"]) == (0, 1)
    assert step3.trigger == {"source": "worker", "action": "step3"}

    # The decider had nothing more to do: the slot is released.
    assert WORKER.match(released.actor)
    assert released.trigger == {"source": "decider", "reason": "nothing to do"}
    assert (state(released, "old")["admission"], state(released, "new")["admission"]) == (
        "admitted",
        "idle",
    )

    # API operations: cancel, then retry.
    with store.sessions.begin() as session:
        items.cancel(session, item_id, registry=registry, now=utcnow(), actor="ocp:bob")
    with store.sessions.begin() as session:
        items.retry(session, item_id, registry=registry, now=utcnow(), actor="ocp:carol")
    cancelled, dequeued, retried = entries(store, item_id)[len(log) :]
    for entry in (cancelled, dequeued, retried):
        check_conventions(entry)
    assert (cancelled.event_type, cancelled.actor) == ("phase_changed", "ocp:bob")
    assert cancelled.trigger == {"source": "api", "action": "cancel"}
    assert (state(cancelled, "old")["phase"], state(cancelled, "new")["phase"]) == (
        "active",
        "cancelled",
    )
    assert (dequeued.event_type, state(dequeued, "new")["admission"]) == ("dequeued", "done")
    assert (retried.event_type, retried.actor) == ("retried", "ocp:carol")
    assert retried.trigger == {"source": "api", "action": "retry"}
    assert (state(retried, "old")["phase"], state(retried, "new")["phase"]) == (
        "cancelled",
        "active",
    )

    # An event makes the decider want to act again: the engine queues the item.
    with store.sessions.begin() as session:
        store_event(session, item_id, "redo", {})
    with store.sessions.begin() as session:
        drain_events(session, item_id, registry)
    (requeued,) = entries(store, item_id)[len(log) + 3 :]
    check_conventions(requeued)
    assert (requeued.event_type, requeued.actor) == ("queued", "system")
    assert requeued.trigger == {"source": "event", "reason": "events applied"}
    assert state(requeued, "old")["admission"] == "idle"


def test_lease_expiry_and_takeover_name_the_previous_owner(
    store: Store, managers: list[Any]
) -> None:
    registry = chain_registry(Behaviour())
    config = make_config(store.url)
    with store.sessions.begin() as session:
        intake = items.submit(
            session,
            new_chain_item("group/project"),
            registry=registry,
            pool=config.pool_for("group/project"),
            now=utcnow(),
            actor="ocp:alice",
            trigger={"source": "api"},
        )
        assert intake.item is not None
        item_id = intake.item.id
    # A replica that died holding the item: admitted, its lease run out.
    with store.sessions.begin() as session:
        session.execute(
            update(WorkItem)
            .where(WorkItem.id == item_id)
            .values(
                admission="admitted",
                lease_owner="host-dead:9",
                lease_token="t",
                leased_until=utcnow() - timedelta(seconds=1),
            )
        )
    sweep_once(store.sessions, registry, config)
    (expired,) = [e for e in entries(store, item_id) if e.event_type == "lease_expired"]
    check_conventions(expired)
    assert expired.actor == "sweep"
    assert expired.old_state == {"lease_owner": "host-dead:9"}
    assert expired.trigger == {"source": "sweep", "reason": "lease expired"}

    with store.sessions.begin() as session:
        session.execute(
            update(WorkItem)
            .where(WorkItem.id == item_id)
            .values(lease_owner="host-dead:9", leased_until=utcnow() - timedelta(seconds=1))
        )
    manager = ProcessingManager(store.sessions, registry, config, owner=OWNER)
    managers.append(manager)
    manager.run_once()
    wait_for(lambda: load(store.sessions, item_id).admission == "idle", message="finished")
    (taken,) = [e for e in entries(store, item_id) if e.event_type == "lease_taken_over"]
    check_conventions(taken)
    assert taken.actor == OWNER
    assert state(taken, "old")["lease_owner"] == "host-dead:9"
    assert state(taken, "new")["lease_owner"] == OWNER
    assert taken.trigger == {"source": "claim", "reason": "lease expired"}
