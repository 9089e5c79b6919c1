"""The daemon's start-up heap is frozen: later collector passes skip it (wq.daemon.heap)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from wq.daemon.heap import YOUNG_GENERATION_THRESHOLD, freeze_startup_heap


class Node:
    """An object that can be part of a reference cycle."""

    def __init__(self) -> None:
        self.other: Node | None = None


@pytest.fixture
def unfrozen() -> Iterator[None]:
    """This test process's heap is thawed again afterwards, its thresholds restored."""
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


def _walked_by_the_collector(obj: object) -> bool:
    # gc.get_objects() lists the generations a collection walks, not the frozen ones.
    return any(candidate is obj for candidate in gc.get_objects())


@pytest.mark.usefixtures("unfrozen")
def test_garbage_is_collected_and_what_lives_is_frozen() -> None:
    garbage, kept = Node(), Node()
    garbage.other = Node()
    garbage.other.other = garbage  # a cycle only the collector frees
    gone = weakref.ref(garbage)
    del garbage
    kept.other = kept
    assert _walked_by_the_collector(kept)

    frozen = freeze_startup_heap()

    assert gone() is None, "start-up garbage would have been frozen for good"
    # At most what was frozen: another thread of the test process (one a test before
    # left running) may drop a frozen object meanwhile (seen once in a full run).
    assert 0 < gc.get_freeze_count() <= frozen
    assert not _walked_by_the_collector(kept)
    # What is made afterwards is collected as before.
    later = Node()
    later.other = later
    assert _walked_by_the_collector(later)


@pytest.mark.usefixtures("unfrozen")
def test_cycles_made_later_are_freed_without_an_explicit_collection() -> None:
    freeze_startup_heap()
    assert gc.get_threshold()[0] == YOUNG_GENERATION_THRESHOLD
    assert gc.isenabled()
    cycle = Node()
    cycle.other = cycle
    gone = weakref.ref(cycle)
    del cycle
    assert gone() is not None  # reference counting alone cannot free a cycle
    # As requests and items make container objects, the collector runs by itself.
    kept = [Node() for _ in range(YOUNG_GENERATION_THRESHOLD * 3)]  # alive, not garbage
    assert gone() is None
    del kept
