"""The worker path's CPU per item on one thread, beside the cheap path's.

`throughput.py` measures what a daemon drains; its figures move with the machine's
speed and with the interpreter's lock shared by a dozen threads. This takes the threads
away: N no-op items (`noop_type`) are submitted and admitted, then drained on this one
thread through the engine's own calls, and the CPU of each step is read with
`time.process_time` around it:

- worker path (`--no-cheap` in `throughput.py`, how `mr` and `task` actions run): a
  claim for the workers (`claim_for_workers`, the items loaded), each item run by the
  `ItemRunner` into a worker's group (`run`), and the group stored and released
  (`finish`) every `--group` items, as `wq.engine.handoff` does;
- cheap path, the baseline of the same run: the same items drained by batches
  (`BatchRunner.take`).

Logging is the daemon's (text, INFO, into /dev/null) and the start-up heap is frozen
as `wq daemon` does, so the figures are those of a daemon's threads minus their
contention. Each path gets a throwaway database of its own.

    python benchmarks/worker_path.py                # 5,000 items, three rounds
    python benchmarks/worker_path.py --items 10000 --rounds 5 --json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from functools import partial
from typing import cast

from databases import add_admin_url, bench_database
from noop_type import TYPE_NAME, noop_registry
from sqlalchemy.orm import Session, sessionmaker
from throughput import bench_config, submit_items

from wq.daemon.heap import freeze_startup_heap
from wq.daemon.logs import setup_logging
from wq.engine import schema
from wq.engine.admission import AdmissionPass
from wq.engine.batch import BatchRunner
from wq.engine.claims import claim_for_workers, item_loads
from wq.engine.config import Config
from wq.engine.db import make_engine, make_sessionmaker
from wq.engine.handoff import MAX_ITEMS_PER_WORKER
from wq.engine.leases import Claim
from wq.engine.models import utcnow
from wq.engine.registry import TypeRegistry
from wq.engine.runner import ItemRunner

PROJECTS = 100
ACTOR = "bench/worker-0"


@dataclass
class Steps:
    """CPU seconds spent in each step of one drain, and the items it drained."""

    items: int = 0
    seconds: dict[str, float] = field(default_factory=dict)

    def timed(self, step: str, call: Callable[[], object]) -> object:
        """Run `call`, adding its CPU time to `step`."""
        started = time.process_time()
        try:
            return call()
        finally:
            self.seconds[step] = self.seconds.get(step, 0.0) + time.process_time() - started

    def per_item_us(self) -> dict[str, float]:
        """Each step's CPU per item in microseconds, and their total."""
        steps = {name: spent / self.items * 1e6 for name, spent in self.seconds.items()}
        steps["total"] = sum(steps.values())
        return steps


Drain = Callable[[sessionmaker[Session], TypeRegistry, Config], Steps]


def drained(admin_url: str, items: int, *, cheap: bool, drain: Drain) -> Steps:
    """`drain` run against a fresh database holding `items` admitted no-op items."""
    with bench_database(None, admin_url, False, prefix="wq_wpath") as url:
        engine = make_engine(url, pool_size=3)
        try:
            schema.upgrade(engine)
            config = bench_config(url, workers=10, poll=1.0)
            registry = noop_registry(cheap)
            sessions = make_sessionmaker(engine)
            submit_items(
                sessions, registry, config, items=items, projects=PROJECTS, batch=500, rate=None
            )
            while True:  # admit everything before the drain: admission is not measured
                with sessions.begin() as session:
                    admission = AdmissionPass(config, None, clock=utcnow, held=set())
                    if not admission.run(session):
                        break
            freeze_startup_heap()
            return drain(sessions, registry, config)
        finally:
            engine.dispose()


def drain_workers(
    sessions: sessionmaker[Session],
    registry: TypeRegistry,
    config: Config,
    *,
    claim_size: int,
    group_size: int,
) -> Steps:
    """The worker path on this thread: claims, each item into a group, groups stored."""
    steps = Steps()
    runner = ItemRunner(sessions, registry, config.processing, utcnow, threading.Event())
    loads = item_loads(registry)
    group = runner.new_group()

    def claim() -> list[Claim]:
        with sessions.begin() as session:
            now = utcnow()
            return claim_for_workers(
                session,
                owner="bench",
                types=[TYPE_NAME],
                free=claim_size,
                now=now,
                lease_until=now + timedelta(seconds=60),
                load=loads,
            ).claims

    while claims := cast(list[Claim], steps.timed("claim", claim)):
        for each in claims:
            run = partial(runner.run, each.id, each.token, ACTOR, item=each.item, group=group)
            steps.timed("run", run)
            if len(group.held()) >= group_size:
                steps.timed("finish", lambda: runner.finish(group))
        steps.timed("finish", lambda: runner.finish(group))
        steps.items += len(claims)
    return steps


def drain_batches(sessions: sessionmaker[Session], registry: TypeRegistry, config: Config) -> Steps:
    """The cheap path on this thread: batches of `processing.batch_size`."""
    steps = Steps()
    runner = BatchRunner(sessions, registry, config.processing, utcnow)
    while taken := cast(
        int,
        steps.timed(
            "batch", lambda: runner.take("bench", limit=config.processing.batch_size).taken
        ),
    ):
        steps.items += taken
    return steps


def main(argv: list[str] | None = None) -> int:
    """Drain each path `--rounds` times, alternating, and print the median per item."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--claim", type=int, default=320, help="items per claim (10 workers' line: 320)"
    )
    parser.add_argument(
        "--group", type=int, default=MAX_ITEMS_PER_WORKER, help="items per stored group"
    )
    parser.add_argument("--json", action="store_true")
    add_admin_url(parser)
    args = parser.parse_args(argv)
    setup_logging("text", open(os.devnull, "w"))  # noqa: SIM115 - for the whole run
    rounds: dict[str, list[dict[str, float]]] = {"worker": [], "cheap": []}
    for number in range(1, args.rounds + 1):
        print(f"... round {number} of {args.rounds}", file=sys.stderr, flush=True)
        worker = drained(
            args.admin_url,
            args.items,
            cheap=False,
            drain=lambda sessions, registry, config: drain_workers(
                sessions, registry, config, claim_size=args.claim, group_size=args.group
            ),
        )
        cheap = drained(args.admin_url, args.items, cheap=True, drain=drain_batches)
        for name, steps in (("worker", worker), ("cheap", cheap)):
            if steps.items != args.items:
                print(f"ANOMALY: {name} drained {steps.items} of {args.items}", file=sys.stderr)
                return 1
            rounds[name].append(steps.per_item_us())
    medians = {
        name: {step: statistics.median(r[step] for r in runs) for step in runs[0]}
        for name, runs in rounds.items()
    }
    ratios = [
        w["total"] / c["total"] for w, c in zip(rounds["worker"], rounds["cheap"], strict=True)
    ]
    if args.json:
        print(json.dumps({"items": args.items, "rounds": rounds, "medians": medians}, indent=2))
        return 0
    print(f"CPU per item on one thread, median of {args.rounds} rounds of {args.items} items:")
    for name, median in medians.items():
        parts = ", ".join(
            f"{step} {value:.1f}" for step, value in median.items() if step != "total"
        )
        print(f"  {name:6s} {median['total']:6.1f} us  ({parts})")
    print(
        f"  worker / cheap: {statistics.median(ratios):.2f}x"
        f" (rounds {min(ratios):.2f}-{max(ratios):.2f}x)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
