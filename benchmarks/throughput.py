#!/usr/bin/env python
"""End-to-end no-op throughput and latency of wq's processing loop on PostgreSQL.

N no-op items are submitted through `wq.engine.items.submit` and processed to idle by
the real `ProcessingManager` (admission dispatcher, SKIP LOCKED claim, decider, executor,
release, audit) with the daemon's LISTEN/NOTIFY wake-ups. Throughput and latency are
derived from the `audit_log` rows the engine writes, not from wall-clock sampling:

* throughput = N / (last `released`→idle row - start), where start is the first
  `created` row (default, overlapping mode) or the moment the manager starts
  (`--phase submit-first`, the drain mode of DESIGN.md "Performance targets");
* latency per item = first `created`/`queued` row → the `released` row whose
  new_state.admission is `idle`; p50/p99 reported, plus the intermediate steps.

In the same database it also times DESIGN's baseline: a raw single-row
`FOR UPDATE SKIP LOCKED` claim + complete loop with psycopg 3 (no ORM, no admission,
no audit) over the same number of pre-enqueued jobs, and optionally the pgqueuer and
procrastinate peers when they are installed. wq's figure is reported as a ratio of each.

It also counts the round trips the engine makes per item (`--statements` lists them),
the CPU the process used, and can cProfile every thread (`--profile PATH`). Every run
checks that each item ran `noop` exactly once and went idle once; anything else is
reported as an anomaly (exit code 1). See benchmarks/README.md for the figures.

This is a measurement, never a test: nothing here asserts a target.

    python benchmarks/throughput.py                      # 10,000 items, overlapping
    python benchmarks/throughput.py --phase submit-first # drain a pre-enqueued backlog
    python benchmarks/throughput.py --items 1000 --json
"""

from __future__ import annotations

import math
import multiprocessing
import os
import platform
import sys
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from audit_analysis import analyse, count_idle, wait_until_idle
from databases import bench_database
from measures import (
    ThreadProfiler,
    checkpoint,
    database_cpu,
    machine_cpu,
    server_version,
    wq_source,
)
from noop_type import TYPE_NAME, NoopItem, noop_registry
from peers import PEERS, PeerResult, fastest_of
from round_trips import StatementCounter, per_item
from sqlalchemy import make_url
from sqlalchemy.orm import Session, sessionmaker
from throughput_options import parse_args
from throughput_report import json_document, render
from wq_result import WqResult

from wq.daemon.heap import freeze_startup_heap
from wq.daemon.logs import setup_logging
from wq.engine import schema
from wq.engine.config import Config, parse_config
from wq.engine.db import make_engine, make_sessionmaker
from wq.engine.items import submit
from wq.engine.listener import NotifyListener
from wq.engine.models import utcnow
from wq.engine.processing import ProcessingManager
from wq.engine.registry import TypeRegistry

# ----------------------------------------------------------------------------- wq


def bench_config(url: str, workers: int, poll: float) -> Config:
    """Like tests' make_config: fast polling, no sweep during the run, huge pools."""
    processing: dict[str, object] = {
        "workers": workers,
        "lease_seconds": 60.0,
        "poll_interval_seconds": poll,
        "sweep_interval_seconds": 3600.0,
        "shutdown_grace_seconds": 10.0,
    }
    if os.environ.get("WQ_BENCH_BATCH_SIZE"):  # else the daemon's default
        processing["batch_size"] = int(os.environ["WQ_BENCH_BATCH_SIZE"])
    return parse_config(
        {
            "database_url": url,
            "processing": processing,
            "pools": {"default": {"capacity": 1_000_000, "alert_capacity": 1}},
            # The start's sweep prunes nothing: scale.py drains into databases whose
            # expired day its next run measures the prune of.
            "audit": {"retention_days": 36500},
        },
        "bench",
    )


def submit_items(
    sessions: sessionmaker[Session],
    registry: TypeRegistry,
    config: Config,
    *,
    items: int,
    projects: int,
    batch: int,
    rate: float | None,
) -> None:
    """Submit `items` no-op items in transactions of `batch`, optionally paced to `rate`/s."""
    started = time.monotonic()
    done = 0
    while done < items:
        if rate:
            ahead = done / rate - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)
        size = min(batch, items - done)
        with sessions.begin() as session:
            for index in range(done, done + size):
                project = f"bench/p{index % projects:04d}"
                submit(
                    session,
                    NoopItem(project=project, lane="normal", autonomous=False),
                    registry=registry,
                    pool=config.pool_for(project),
                    now=utcnow(),
                    actor="bench",
                    trigger={"source": "bench"},
                )
        done += size


def _process_replica(
    url: str,
    workers: int,
    poll: float,
    cheap: bool,
    listen: bool,
    index: int,
    ready: Any,
    go: Any,
    halt: Any,
    report: Any,
) -> None:
    """A processing manager in a process of its own, like a second daemon (`--processes`)."""
    config = bench_config(url, workers, poll)
    engine = make_engine(url, pool_size=workers + 5)
    manager = ProcessingManager(
        make_sessionmaker(engine), noop_registry(cheap), config, owner=f"bench-p{index}"
    )
    listener = NotifyListener(engine, manager.wakeup) if listen else None
    freeze_startup_heap()  # as a started daemon does
    cpu_start = time.process_time()
    if listener:
        listener.start()
        listener.wait_ready(10)
    ready.set()
    go.wait()  # set by the parent right after it started its own manager
    manager.start()
    halt.wait()
    manager.stop(grace=10)
    if listener:
        listener.stop()
    engine.dispose()
    report.put(time.process_time() - cpu_start)


def run_wq(
    url: str,
    *,
    items: int,
    projects: int,
    workers: int,
    batch: int,
    phase: str,
    rate: float | None,
    poll: float,
    listen: bool,
    timeout: float,
    on_phase: Callable[[str], None],
    cheap: bool = True,
    replicas: int = 1,
    processes: int = 1,
) -> WqResult:
    """Submit and process `items` no-op items; measure from the audit log.

    `replicas` > 1 runs that many managers in this process, each with its own engine,
    wake-up hub and LISTEN connection, like daemons sharing the database; items are
    submitted through the first one's sessions (as its API would). `processes` > 1
    adds that many minus one managers in child processes (each its own GIL); their
    statements are not counted, their CPU is.
    """
    config = bench_config(url, workers, poll)
    registry = noop_registry(cheap)
    database = make_url(url).database or ""
    engine = make_engine(url, pool_size=workers + 5)  # as the daemon sizes it
    observer = make_engine(url, pool_size=1)  # polling and analysis, not counted
    _, existing = count_idle(observer)
    if existing:
        raise SystemExit(
            f"the database already holds {TYPE_NAME} items {existing}: use a fresh one"
        )
    engines = [engine] + [make_engine(url, pool_size=workers + 5) for _ in range(replicas - 1)]
    counters = [StatementCounter(each) for each in engines]

    class _Counters:
        def snapshot(self) -> Counter[str]:
            total: Counter[str] = Counter()
            for each in counters:
                total += each.snapshot()
            return total

    counter = _Counters()
    submit_counts: Counter[str] | None = None
    try:
        managers = [
            ProcessingManager(
                make_sessionmaker(each),
                registry,
                config,
                owner="bench" if index == 0 else f"bench-{index}",
            )
            for index, each in enumerate(engines)
        ]
        listeners = (
            [
                NotifyListener(each, manager.wakeup)
                for each, manager in zip(engines, managers, strict=True)
            ]
            if listen
            else []
        )
        manager = managers[0]
        sessions = manager.sessions
        freeze_startup_heap()  # as a started daemon does, before its first request
        context = multiprocessing.get_context("spawn")
        go, halt = context.Event(), context.Event()
        ready = [context.Event() for _ in range(processes - 1)]
        cpu_reports = context.Queue()
        children = [
            context.Process(
                target=_process_replica,
                args=(url, workers, poll, cheap, listen, index + 1, ready[index], go, halt),
                kwargs={"report": cpu_reports},
                daemon=True,
            )
            for index in range(processes - 1)
        ]
        for child in children:
            child.start()
        for event in ready:
            if not event.wait(60):
                raise SystemExit("a child process did not start")

        def start_children() -> None:
            go.set()

        def submit_all() -> float:
            started = time.monotonic()
            submit_items(
                sessions, registry, config, items=items, projects=projects, batch=batch, rate=rate
            )
            return time.monotonic() - started

        process_start: datetime | None = None
        children_cpu = 0.0
        if phase == "submit-first":
            on_phase(f"wq: submitting {items} items (manager stopped)")
            submit_seconds = submit_all()
            submit_counts = counter.snapshot()
            on_phase("wq: draining the backlog")
            wall_start, cpu_start = time.monotonic(), time.process_time()
            machine_start = machine_cpu()
            database_start = database_cpu(database)
            process_start = utcnow()
            for listener in listeners:
                listener.start()
            for each in managers:
                each.start()
            start_children()
        else:
            wall_start, cpu_start = time.monotonic(), time.process_time()
            machine_start = machine_cpu()
            database_start = database_cpu(database)
            for listener in listeners:
                listener.start()
            for each in managers:
                each.start()
            start_children()
            on_phase(f"wq: submitting {items} items while processing")
            submit_seconds = submit_all()
        try:
            wait_until_idle(observer, items, timeout)
            wall_seconds = time.monotonic() - wall_start
            cpu_seconds = time.process_time() - cpu_start
            machine_end = machine_cpu()
            database_end = database_cpu(database)
        finally:
            for running in managers:
                running.stop(grace=10)
            for listener in listeners:
                listener.stop()
            halt.set()
            for child in children:
                children_cpu += cpu_reports.get(timeout=30)
                child.join(timeout=30)
        cpu_seconds += children_cpu
        total_counts = counter.snapshot()
        measured, anomalies = analyse(observer, items)
    finally:
        for pooled in engines:
            pooled.dispose()
        observer.dispose()
    times = measured["times"]
    start = process_start or times["first_queued"]
    process_seconds = (
        (times["last_idle"] - start).total_seconds()
        if start is not None and times["last_idle"] is not None
        else math.nan
    )
    statements: dict[str, dict[str, float]] = {}
    if submit_counts is not None:
        statements["submit"] = per_item(submit_counts, items)
        statements["process"] = per_item(total_counts - submit_counts, items)
    else:
        statements["submit+process"] = per_item(total_counts, items)
    return WqResult(
        phase=phase,
        items=items,
        projects=projects,
        workers=workers,
        batch=batch,
        rate=rate,
        replicas=replicas,
        processes=processes,
        cheap=cheap,
        submit_seconds=submit_seconds,
        submit_per_second=items / submit_seconds if submit_seconds else math.nan,
        process_seconds=process_seconds,
        items_per_second=items / process_seconds if process_seconds else math.nan,
        wall_seconds=wall_seconds,
        cpu_seconds=cpu_seconds,
        cpu_ms_per_item=cpu_seconds / items * 1000,
        database_cpu_ms_per_item=(
            sum(end - database_start.get(pid, 0.0) for pid, end in database_end.items())
            / items
            * 1000
        ),
        machine_cores_busy=(
            (machine_end[0] - machine_start[0]) / wall_seconds
            if machine_start and machine_end and wall_seconds
            else None
        ),
        latency=measured["latency"],
        statements_per_item=statements,
        anomalies=anomalies,
    )


# ----------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    """Run the peers, then wq, and print the report; 1 if wq's run had an anomaly."""
    args = parse_args(argv)
    if args.switch_interval:
        sys.setswitchinterval(args.switch_interval)
    if not args.quiet_logging:
        setup_logging("text", open(os.devnull, "w"))  # noqa: SIM115 - for the whole run
    quiet = args.json

    def on_phase(message: str) -> None:
        if not quiet:
            print(f"... {message}", file=sys.stderr, flush=True)

    load_before = os.getloadavg()[0]
    source = wq_source()
    with bench_database(args.database_url, args.admin_url, args.keep_database) as url:
        engine = make_engine(url, pool_size=1)
        try:
            schema.upgrade(engine)
        finally:
            engine.dispose()
        peers: list[PeerResult] = []
        for peer in args.peer_list:
            rounds = []
            for round_number in range(1, args.peer_rounds + 1):
                on_phase(
                    f"peer {peer}: {args.items} jobs, {args.peer_threads} threads"
                    f" (round {round_number} of {args.peer_rounds})"
                )
                rounds.append(PEERS[peer](url, args.items, args.peer_threads))
            peers.append(fastest_of(rounds))
        checkpoint(url)
        profiler = ThreadProfiler() if args.profile else None
        if profiler:
            profiler.start()
        result = run_wq(
            url,
            items=args.items,
            projects=args.projects,
            workers=args.workers,
            batch=args.batch,
            phase=args.phase,
            rate=args.rate,
            poll=args.poll_interval,
            listen=not args.no_listen,
            timeout=args.timeout,
            on_phase=on_phase,
            cheap=not args.no_cheap,
            replicas=args.replicas,
            processes=args.processes,
        )
        if profiler:
            profiler.stop(args.profile)
            on_phase(f"profile written to {args.profile}")
        report: dict[str, Any] = {
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "postgres": server_version(url),
            "wq_source": source,
            "switch_interval": sys.getswitchinterval(),
            "load_before": load_before,
            "load_after": os.getloadavg()[0],
            "logging": "off" if args.quiet_logging else "as wq daemon (INFO, text, /dev/null)",
        }
    if args.json:
        print(json_document(report, result, peers))
    else:
        render(report, result, peers, verbose=args.statements)
    return 1 if result.anomalies else 0


if __name__ == "__main__":
    sys.exit(main())
