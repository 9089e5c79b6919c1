"""The worker path: what changes while an action runs, lost leases, the item's stamp."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import select, update

from tests.conftest import Store, make_config
from tests.engine.helpers import audit_types, load, submit
from tests.support.chain import Behaviour, chain_type, handle_event, make_executor
from tests.support.chain import decide as chain_decide
from tests.support.waiting import wait_for
from wq.engine.dimensions import set_dimension
from wq.engine.events import drain_events, store_event
from wq.engine.metrics import metrics_of
from wq.engine.models import WorkItem, WorkItemStatus
from wq.engine.processing import ProcessingManager
from wq.engine.registry import ActionContext, EventContext, TypeRegistry


def again(ctx: EventContext) -> None:
    """`again`: step1 is needed again (its dimension goes back to "true")."""
    if ctx.event_type == "again":
        set_dimension(ctx.session, ctx.item, "needs_step1", True)
    else:
        handle_event(ctx)


def registry_with(
    behaviour: Behaviour, step: str, meanwhile: Callable[[ActionContext], None]
) -> TypeRegistry:
    """The chain type, with `meanwhile` called while `step`'s executor runs."""
    chain = dataclasses.replace(chain_type(behaviour), event_handler=again)
    plain = make_executor(step, behaviour)

    def run(ctx: ActionContext) -> None:
        meanwhile(ctx)
        plain(ctx)

    chain.executors[step] = run  # type: ignore[index]
    registry = TypeRegistry()
    registry.register_type(chain)
    return registry


def run_until_settled(store: Store, registry: TypeRegistry, item_id: uuid.UUID) -> None:
    """Claim the item once and wait until its worker has returned."""
    manager = ProcessingManager(store.sessions, registry, make_config(store.url))
    assert manager.run_once() == 1
    wait_for(lambda: manager.busy == 0, message="the worker returned")


def dimensions(store: Store, item_id: uuid.UUID) -> dict[str, str]:
    return {row.dimension: row.status for row in load(store.sessions, item_id).statuses}


def test_an_event_applied_while_the_last_action_runs_is_seen_before_the_item_idles(
    store: Store,
) -> None:
    # The event is applied (committed) while step3 calls out, between the worker's
    # read of the item and its fence. The worker must see it and run step1 again
    # instead of letting the item go idle with step1 wanted. The event's transaction
    # also shows that the worker holds no lock while an executor runs (it would wait).
    behaviour = Behaviour()
    applied: list[uuid.UUID] = []

    def apply_event(ctx: ActionContext) -> None:
        if applied:
            return
        applied.append(ctx.item.id)
        with store.sessions.begin() as session:
            store_event(session, ctx.item.id, "again", {})
        with store.sessions.begin() as session:
            assert drain_events(session, ctx.item.id, registry).applied == 1

    registry = registry_with(behaviour, "step3", apply_event)
    item_id = submit(store.sessions, registry, make_config(store.url)).item.id  # type: ignore[union-attr]
    run_until_settled(store, registry, item_id)

    assert behaviour.actions_of(item_id) == ["step1", "step2", "step3", "step1"]
    item = load(store.sessions, item_id)
    assert item.admission == "idle" and item.lease_token is None
    assert dimensions(store, item_id) == dict.fromkeys(
        ["needs_step1", "needs_step2", "needs_step3"], "false"
    )
    trail = audit_types(store.sessions, item_id)
    assert trail.count("action_completed") == 4 and trail[-1] == "released"


def test_an_event_applied_after_the_worker_decided_to_let_go_is_seen(store: Store) -> None:
    # The worker reads the item, its decider has nothing to do, and before the fence
    # an event wants step1 again: the worker runs step1 instead of letting go.
    behaviour = Behaviour()
    registry = registry_with(behaviour, "step1", lambda ctx: None)
    chain = registry.get("chain")
    armed: list[uuid.UUID] = []

    def decide(item: WorkItem, now: Any) -> Any:
        decision = chain_decide(item, now)
        if decision is None and armed:
            target = armed.pop()
            with store.sessions.begin() as session:
                store_event(session, target, "again", {})
            with store.sessions.begin() as session:
                assert drain_events(session, target, registry).applied == 1
        return decision

    object.__setattr__(chain, "decider", decide)
    item_id = submit(store.sessions, registry, make_config(store.url)).item.id  # type: ignore[union-attr]
    with store.sessions.begin() as session:  # nothing to do, but still admitted
        found = session.get(WorkItem, item_id)
        for step in ("step1", "step2", "step3"):
            set_dimension(session, found, f"needs_{step}", False)
    armed.append(item_id)
    run_until_settled(store, registry, item_id)

    assert not armed and behaviour.actions_of(item_id) == ["step1"]
    item = load(store.sessions, item_id)
    assert item.admission == "idle" and dimensions(store, item_id)["needs_step1"] == "false"


def test_an_item_cancelled_while_its_action_runs_ends_cancelled_and_frees_its_slot(
    store: Store,
) -> None:
    behaviour = Behaviour()

    def cancel(ctx: ActionContext) -> None:
        with store.sessions.begin() as session:
            store_event(session, ctx.item.id, "cancel", {})
        with store.sessions.begin() as session:
            drain_events(session, ctx.item.id, registry)

    registry = registry_with(behaviour, "step1", cancel)
    item_id = submit(store.sessions, registry, make_config(store.url)).item.id  # type: ignore[union-attr]
    run_until_settled(store, registry, item_id)

    assert behaviour.actions_of(item_id) == ["step1"]
    item = load(store.sessions, item_id)
    assert (item.phase, item.admission, item.lease_token) == ("cancelled", "done", None)
    # Ending the item released its lease: the action's writes were discarded.
    assert dimensions(store, item_id) == {}
    assert "action_completed" not in audit_types(store.sessions, item_id)


@pytest.mark.parametrize("step", ["step1", "step3"])  # then another action; then idle
def test_a_worker_fenced_out_during_its_action_leaves_no_writes(store: Store, step: str) -> None:
    behaviour = Behaviour()

    def steal(ctx: ActionContext) -> None:
        with store.sessions.begin() as session:
            session.execute(
                update(WorkItem).where(WorkItem.id == ctx.item.id).values(lease_token="other")
            )

    registry = registry_with(behaviour, step, steal)
    item_id = submit(store.sessions, registry, make_config(store.url)).item.id  # type: ignore[union-attr]
    if step == "step3":  # steps 1 and 2 are done already
        with store.sessions.begin() as session:
            found = session.get(WorkItem, item_id)
            set_dimension(session, found, "needs_step1", False)
            set_dimension(session, found, "needs_step2", False)
    before = load(store.sessions, item_id)
    runs = metrics_of(store.sessions).executor_runs

    def counted() -> tuple[float, float]:
        return tuple(  # type: ignore[return-value]
            runs.labels("chain", step, outcome)._value.get()
            for outcome in ("lease_lost", "succeeded")
        )

    lost, succeeded = counted()
    run_until_settled(store, registry, item_id)

    assert behaviour.actions_of(item_id) == [step]
    item = load(store.sessions, item_id)
    assert item.lease_token == "other" and item.admission == "admitted"
    assert item.stamp == before.stamp and item.attempts == 0
    assert dimensions(store, item_id) == {
        row.dimension: row.status for row in before.statuses
    }  # nothing of the action
    assert "action_completed" not in audit_types(store.sessions, item_id)
    assert counted() == (lost + 1, succeeded)


def stamp_of(store: Store, item_id: uuid.UUID) -> int:
    with store.sessions() as session:
        return int(
            session.execute(select(WorkItem.stamp).where(WorkItem.id == item_id)).scalar_one()
        )


def test_every_change_of_an_item_or_its_dimensions_gives_it_a_new_stamp(store: Store) -> None:
    registry = registry_with(Behaviour(), "step1", lambda ctx: None)
    item_id = submit(store.sessions, registry, make_config(store.url)).item.id  # type: ignore[union-attr]
    seen = [stamp_of(store, item_id)]

    def changed(change: Callable[[Any], None]) -> bool:
        with store.sessions.begin() as session:
            change(session)
        seen.append(stamp_of(store, item_id))
        return seen[-1] != seen[-2]

    def item(session: Any) -> WorkItem:
        found = session.get(WorkItem, item_id)
        assert found is not None
        return found

    assert changed(lambda s: set_dimension(s, item(s), "needs_step1", False))  # a new row
    assert changed(lambda s: set_dimension(s, item(s), "needs_step1", True))  # a changed row
    assert changed(lambda s: setattr(item(s), "error", "something"))  # a column
    assert not changed(lambda s: setattr(item(s), "error", "something"))  # the same value

    def status_alone(session: Any) -> None:  # the item itself not loaded
        row = session.get(WorkItemStatus, (item_id, "needs_step1", ""))
        row.status = "false"

    assert changed(status_alone)
    assert not changed(status_alone)  # a row's column set to its own value
    assert changed(lambda s: set_dimension(s, item(s), "needs_step2", False))

    def delete_one(session: Any) -> None:
        session.delete(session.get(WorkItemStatus, (item_id, "needs_step1", "")))

    def remove_one(session: Any) -> None:  # from the collection: deleted as an orphan
        found = item(session)
        found.statuses.remove(found.status("needs_step2"))

    assert changed(delete_one)
    assert changed(remove_one)
    assert dimensions(store, item_id) == {}

    def lease_only(session: Any) -> None:  # leases and heartbeats: not a change
        session.execute(update(WorkItem).where(WorkItem.id == item_id).values(lease_owner="x"))

    assert not changed(lease_only)
    assert len(set(seen)) == len(seen) - 3


def test_the_stamp_migration_keeps_the_claim_index(store: Store) -> None:
    # 0009 adds the column in place: a rebuilt table (SQLite's batch mode) would have
    # lost the expression index of 0008, which reflection does not see.
    with store.engine.connect() as connection:
        if store.engine.dialect.name == "sqlite":
            query = "SELECT name FROM sqlite_master WHERE type = 'index'"
        else:
            query = "SELECT indexname FROM pg_indexes WHERE tablename = 'work_items'"
        names = set(connection.exec_driver_sql(query).scalars())
    assert "ix_work_items_claimable" in names
