"""What wakes the scheduler, and what a pass then does: no pass that can only find nothing.

At low rates every item used to cost extra passes: its admission woke the scheduler
that had just claimed it, and its release woke it for an admission pass that admitted
nothing, each followed by a claim and a batch that found nothing (a quarter of the
round trips per item at 20 items/s). Work must still never wait for the poll.
"""

from __future__ import annotations

import time
from typing import Any

from tests.conftest import Store, make_config
from tests.engine.helpers import load, submit, submit_many
from tests.support.chain import Behaviour, chain_registry
from tests.support.waiting import wait_for
from wq.engine.batch import BatchRunner
from wq.engine.processing import ProcessingManager

POOLS = {"default": {"capacity": 1, "alert_capacity": 1}}


def counted_batches(monkeypatch: Any) -> list[int]:
    """How many items each batch took, in order."""
    taken: list[int] = []
    real = BatchRunner.take

    def take(self: BatchRunner, *args: Any, **kwargs: Any) -> Any:
        result = real(self, *args, **kwargs)
        taken.append(result.taken)
        return result

    monkeypatch.setattr(BatchRunner, "take", take)
    return taken


def test_one_item_at_a_time_costs_one_batch_and_waits_for_no_poll(
    store: Store, managers: list[Any], monkeypatch: Any
) -> None:
    # Capacity 1: the second item waits queued until the first is released, and is
    # then admitted by the pass its release wakes (the poll is a minute away).
    config = make_config(store.url, pools=POOLS, processing={"poll_interval_seconds": 60.0})
    registry = chain_registry(Behaviour(), cheap=True)
    manager = ProcessingManager(store.sessions, registry, config, owner="solo")
    batches = counted_batches(monkeypatch)
    manager.start()
    managers.append(manager)
    wait_for(lambda: batches, message="the first pass")
    time.sleep(0.2)
    batches.clear()

    first, second = submit_many(manager.sessions, registry, config, ["g/p", "g/p"])
    for item_id in (first, second):
        wait_for(lambda i=item_id: load(store.sessions, i).admission == "idle", message="idle")
    time.sleep(0.3)  # any pass still to come
    # Each item's batch, and no batch that found nothing (its admission's own wake-up,
    # the release's admission pass that admitted nothing).
    assert [n for n in batches if n] == [1, 1]
    assert batches.count(0) <= 1  # at most a pass racing a batch still holding its row

    # A submission to a project at capacity admits nothing and takes no batch.
    blocker = submit(manager.sessions, registry, config, "g/q").item
    assert blocker is not None
    wait_for(lambda: load(store.sessions, blocker.id).admission == "idle", message="idle")
    time.sleep(0.3)
    before = len(batches)
    with manager.sessions.begin() as session:  # hold g/q's slot: admitted, never claimed
        item = session.get(type(blocker), blocker.id)
        assert item is not None
        item.admission, item.phase = "admitted", "completed"
    submit(manager.sessions, registry, config, "g/q")
    time.sleep(0.3)
    assert len(batches) == before
