"""The daemon's heap and Python's cyclic garbage collector.

A started daemon holds some 170,000 objects that live as long as the process: modules,
classes, the ORM's mappers, FastAPI's routes, pydantic's validators. Every full
(generation 2) pass of the cyclic collector walked them all, a pause of 20-120 ms
holding the GIL (some ten passes in ten seconds of 100 list requests a second, and
the main source of the API's p99). Once start-up is done they are collected once and
frozen (`gc.freeze`): later passes skip them, so a full pass walks what requests and
engine threads made since, a few thousand objects. Reference counting still frees a
frozen object that is dropped; only a cycle among frozen objects would stay, and what
start-up leaves alive is meant to live until the process ends.

The young generation is then collected after `YOUNG_GENERATION_THRESHOLD` new
container objects instead of Python's 700: an item's way through the engine makes
hundreds (ORM states, rows, audit entries), so the default made a pass every few
items; the collector's time over a drain of 10,000 items halved (benchmarks/README.md).
A pass then walks at most that many young objects (about a millisecond); cyclic
garbage is still freed, in fewer, larger passes.
"""

from __future__ import annotations

import gc

YOUNG_GENERATION_THRESHOLD = 10_000


def freeze_startup_heap() -> int:
    """Collect what start-up left as garbage, freeze the rest, and collect the young
    generation less often; return the objects now frozen."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_GENERATION_THRESHOLD, middle, old)
    return gc.get_freeze_count()
