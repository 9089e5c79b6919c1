"""Helpers for the event tests: GitLab payloads, items, delivery and counters."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from sqlalchemy import select

from tests.conftest import Store, make_config
from tests.types.mr.helpers import payload
from wq.engine.envelope import Event
from wq.engine.events import drain_events, ingest
from wq.engine.metrics import DEFAULT, Metrics
from wq.engine.models import PendingEvent, WorkItem, utcnow
from wq.engine.registry import SubmitContext, TypeRegistry
from wq.types.mr.models import MrItem
from wq.types.mr.schemas import MrCreate
from wq.types.mr.upsert import submit_mr

PROJECT = "group/project"


def make_queue(sqs: Any, **attributes: str) -> str:
    """A fresh queue (with the given attributes) and its URL."""
    name = f"wq-{uuid.uuid4().hex[:8]}"
    return str(sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"])


def queue_depth(sqs: Any, queue: str) -> int:
    """Messages still in a queue, visible or not."""
    attributes = sqs.get_queue_attributes(
        QueueUrl=queue,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"]) + int(
        attributes["ApproximateNumberOfMessagesNotVisible"]
    )


def mr_event(
    action: str,
    iid: Any = 1,
    updated_at: str = "2026-01-01 10:00:00 UTC",
    branch: str = "wq/sync-1",
) -> dict[str, Any]:
    """A GitLab merge_request event."""
    return {
        "object_kind": "merge_request",
        "project": {"path_with_namespace": PROJECT},
        "object_attributes": {
            "id": 900 + iid if isinstance(iid, int) else 900,
            "iid": iid,
            "action": action,
            "source_branch": branch,
            "updated_at": updated_at,
        },
    }


def pipeline_event(
    status: str,
    pipeline_id: int = 77,
    branch: str = "wq/sync-1",
    finished_at: str = "2026-01-01 11:00:00 UTC",
) -> dict[str, Any]:
    """A GitLab pipeline event of a branch pipeline."""
    return {
        "object_kind": "pipeline",
        "project": {"path_with_namespace": PROJECT},
        "object_attributes": {
            "id": pipeline_id,
            "ref": branch,
            "tag": False,
            "status": status,
            "finished_at": finished_at,
        },
        "merge_request": None,
    }


def build_event(
    build_id: int,
    branch: str = "wq/sync-1",
    *,
    pipeline_id: int = 77,
    status: str = "failed",
    finished_at: str = "2026-01-01 10:30:00 UTC",
) -> dict[str, Any]:
    """A GitLab job ("build") event."""
    return {
        "object_kind": "build",
        "project": {"path_with_namespace": PROJECT},
        "ref": branch,
        "tag": False,
        "build_id": build_id,
        "build_name": "rpm-build",
        "build_status": status,
        "build_failure_reason": "runner_system_failure",
        "build_finished_at": finished_at,
        "retries_count": 0,
        "pipeline_id": pipeline_id,
    }


def new_item(
    store: Store, registry: TypeRegistry, mr_iid: int | None = 1, branch: str = "wq/sync-1"
) -> uuid.UUID:
    """An active MR item on `branch` that knows MR `mr_iid` (None: no MR yet)."""
    ctx = SubmitContext(
        registry=registry, pool=make_config(store.url).pool_for(PROJECT), actor="t", now=utcnow()
    )
    with store.sessions.begin() as session:
        result = submit_mr(
            session,
            MrCreate.model_validate(payload(source_branch=branch)),
            ctx,
            registry.get("mr").settings,
        )
        assert isinstance(result.item, MrItem)
        result.item.mr_iid = mr_iid
        return result.item.id


def apply_pending(store: Store, registry: TypeRegistry) -> None:
    """Apply every stored event (what the scheduler does)."""
    with store.sessions() as session:
        ids = session.execute(select(PendingEvent.work_item_id).distinct()).scalars().all()
    for item_id in ids:
        with store.sessions.begin() as session:
            drain_events(session, item_id, registry)


def deliver(store: Store, registry: TypeRegistry, document: dict[str, Any]) -> int:
    """Ingest one event and apply it; return for how many items it was stored."""
    stored = ingest(
        store.sessions, registry, Event(document["object_kind"], document), source="webhook"
    )
    apply_pending(store, registry)
    return stored


def item(store: Store, item_id: uuid.UUID) -> MrItem:
    """A detached copy of an item as stored now."""
    with store.sessions() as session:
        found = session.get(WorkItem, item_id)
        assert isinstance(found, MrItem)
        session.expunge_all()
        return found


APPLICATION_OUTCOMES = ("applied", "discarded", "failed")


def counted(outcome: str, metrics: Metrics = DEFAULT) -> float:
    """How many events were counted with an outcome so far, from any source.

    A daemon's runtime has metrics of its own; bare test sessions count in `DEFAULT`.
    """
    applied = outcome in APPLICATION_OUTCOMES
    counter = metrics.event_applications if applied else metrics.events
    return sum(
        sample.value
        for metric in counter.collect()
        for sample in metric.samples
        if sample.name.endswith("_total") and sample.labels.get("outcome") == outcome
    )


Deliver = Callable[[Store, TypeRegistry, dict[str, Any]], int]


def check_resolution(store: Store, registry: TypeRegistry, deliver: Deliver) -> None:
    """An event concerns the item that knows its MR, else (while no item knows that MR)
    the active item on the branch it names; each event delivered by `deliver` (the
    session's path or the event loop's)."""
    known = new_item(store, registry, 4, "wq/known")
    fresh = new_item(store, registry, None, "wq/fresh")
    # Another branch, no branch, or an MR some item already knows: not the fresh item.
    assert deliver(store, registry, mr_event("close", 5, branch="wq/elsewhere")) == 0
    nameless = mr_event("close", 5)
    del nameless["object_attributes"]["source_branch"]
    assert deliver(store, registry, nameless) == 0
    assert deliver(store, registry, mr_event("close", 4, branch="wq/fresh")) == 1
    assert item(store, known).phase == "cancelled"
    assert item(store, fresh).phase == "active"
    # A finished item's MR on the fresh item's branch is still not the fresh item's.
    assert deliver(store, registry, mr_event("close", 4, branch="wq/fresh")) == 0
    assert item(store, fresh).phase == "active"
    # The fresh item's own MR, before the item recorded its iid: the branch decides.
    assert deliver(store, registry, mr_event("approved", 6, branch="wq/fresh")) == 1
    assert item(store, fresh).status("needs_reconcile") is not None
