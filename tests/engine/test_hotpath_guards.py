"""Guards for issue 17's hot path: batch releases by one UPDATE, on-commit values by kind.

A batch lets its items go with one Core UPDATE and sets their loaded state as
written (`release_slots`): what a cheap action changed besides must still be written,
once, and an item its action already let go must not be released twice. On-commit
values are kept per kind: savepoints still decide which audit rows reach the table
(COPY on PostgreSQL) and which signals are delivered.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import UTC, datetime

from sqlalchemy import select

from tests.conftest import Store, make_config
from tests.engine.helpers import audit_types, load, submit_many
from tests.support.chain import Behaviour, chain_type, make_executor
from wq.engine.admission import dispatch
from wq.engine.audit import AuditRecord, audit
from wq.engine.batch import BatchRunner, Taken
from wq.engine.items import set_phase
from wq.engine.models import AuditEntry, utcnow
from wq.engine.registry import ActionContext, TypeRegistry
from wq.engine.wakeup import PROJECT_QUEUED, WAKEUP_KEY, Wakeup, signal

BIG_POOLS = {"default": {"capacity": 1000, "alert_capacity": 1}}
EVENT_AT = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def run_batch(store: Store, registry: TypeRegistry, count: int) -> list[uuid.UUID]:
    """`count` admitted chain items, taken and run as one batch; their ids."""
    config = make_config(store.url, pools=BIG_POOLS)
    ids = submit_many(store.sessions, registry, config, [f"g/p{n % 2}" for n in range(count)])
    dispatch(store.sessions, config, clock=utcnow)
    runner = BatchRunner(store.sessions, registry, config.processing, utcnow)
    assert runner.take("me", limit=count) == Taken(count, [])
    return ids


def registry_with_step2(step2: object) -> TypeRegistry:
    chain = chain_type(Behaviour(), cheap=True)
    registry = TypeRegistry()
    registry.register_type(replace(chain, executors={**chain.executors, "step2": step2}))
    return registry


def test_a_batch_release_keeps_what_the_action_changed_beside_it(store: Store) -> None:
    finish = make_executor("step2", Behaviour())

    def step2_ends_with_changes(ctx: ActionContext) -> None:
        finish(ctx)
        ctx.item.phase = "completed"
        ctx.item.error = "kept"
        ctx.item.last_event_at = EVENT_AT

    started = utcnow()
    ids = run_batch(store, registry_with_step2(step2_ends_with_changes), 4)
    for item_id in ids:
        item = load(store.sessions, item_id)
        assert (item.phase, item.admission, item.error) == ("completed", "done", "kept")
        assert item.last_event_at == EVENT_AT
        assert (item.lease_owner, item.lease_token, item.leased_until) == (None, None, None)
        assert item.updated_at >= started
        assert audit_types(store.sessions, item_id)[-3:] == [
            "action_completed",
            "action_completed",
            "released",
        ]
    with store.sessions() as session:
        released = session.execute(
            select(AuditEntry.new_state).where(AuditEntry.event_type == "released")
        ).scalars()
        assert [state["admission"] for state in released] == ["done"] * len(ids)


def test_an_item_its_action_let_go_is_released_once(store: Store) -> None:
    """set_phase releases through the ORM; the batch's release must then skip it."""
    finish = make_executor("step2", Behaviour())

    def step2_cancels(ctx: ActionContext) -> None:
        finish(ctx)
        set_phase(ctx.session, ctx.item, "cancelled", actor=ctx.actor, trigger={"source": "test"})

    ids = run_batch(store, registry_with_step2(step2_cancels), 3)
    for item_id in ids:
        item = load(store.sessions, item_id)
        assert (item.phase, item.admission, item.lease_token) == ("cancelled", "done", None)
        assert audit_types(store.sessions, item_id) == [
            "created",
            "queued",
            "admitted",
            "action_completed",
            "phase_changed",
            "released",
            "action_completed",
        ]


def test_savepoints_decide_which_audit_rows_and_signals_commit(store: Store) -> None:
    hub = Wakeup()
    store.sessions.configure(info={WAKEUP_KEY: hub})

    def row(name: str) -> AuditRecord:
        return AuditRecord(name, "t", trigger={"source": "test"}, metadata={"n": name})

    with store.sessions() as session:
        audit(session, row("root"))
        with session.begin_nested():  # released, but its inner savepoint rolls back
            audit(session, row("outer"))
            signal(session, PROJECT_QUEUED, "outer")
            try:
                with session.begin_nested():
                    audit(session, row("inner"))
                    signal(session, PROJECT_QUEUED, "again")
                    raise RuntimeError("roll the inner savepoint back")
            except RuntimeError:
                pass
        try:
            with session.begin_nested():  # its rows go, though it contains a released one
                with session.begin_nested():
                    audit(session, row("deep"))
                    signal(session, PROJECT_QUEUED, "deep")
                raise RuntimeError("roll the savepoint back")
        except RuntimeError:
            pass
        # Dropped with its savepoint, so signalled again here: it must be delivered.
        signal(session, PROJECT_QUEUED, "again")
        audit(session, row("last"))
        session.commit()
    with store.sessions() as session:
        written = session.execute(
            select(AuditEntry.event_type, AuditEntry.extra).order_by(AuditEntry.id)
        ).all()
    assert [(name, extra) for name, extra in written] == [
        (name, {"n": name}) for name in ("root", "outer", "last")
    ]
    assert hub.wait(0).projects == {"outer", "again"}
