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

import argparse
import asyncio
import contextlib
import cProfile
import importlib.util
import json
import logging
import math
import multiprocessing
import os
import platform
import pstats
import sys
import threading
import time
import weakref
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

import psycopg
from databases import add_admin_url, bench_database, libpq_url
from sqlalchemy import Engine, event, make_url, text
from sqlalchemy.orm import Session, sessionmaker

from wq.daemon.heap import freeze_startup_heap
from wq.daemon.logs import setup_logging
from wq.engine import audit, schema
from wq.engine.config import Config, parse_config
from wq.engine.db import make_engine, make_sessionmaker
from wq.engine.dimensions import first_actionable, set_dimension
from wq.engine.items import submit
from wq.engine.listener import NotifyListener
from wq.engine.models import WorkItem, utcnow
from wq.engine.processing import ProcessingManager
from wq.engine.registry import ActionContext, ItemType, TypeRegistry

TYPE_NAME = "bench_noop"
DIMENSION = "needs_noop"
RAW_TABLE = "wq_bench_raw_jobs"
RAW_NAME = "raw SKIP LOCKED (psycopg 3)"

# ----------------------------------------------------------------------------- the type


class NoopItem(WorkItem):
    """The benchmark's item: the generic columns only (single-table inheritance)."""

    __mapper_args__ = {"polymorphic_identity": TYPE_NAME}  # noqa: RUF012

    def details_dict(self) -> dict[str, object]:
        return {}


def decide(item: WorkItem, now: datetime) -> str | None:
    """`noop` while `needs_noop` is actionable (absent or true), then nothing."""
    return "noop" if first_actionable(item, [DIMENSION], now) else None


def run_noop(ctx: ActionContext) -> None:
    """The whole job: mark the dimension handled."""
    set_dimension(ctx.session, ctx.item, DIMENSION, False)


def noop_registry(cheap: bool = True) -> TypeRegistry:
    """A registry with only the no-op type (its action marked cheap unless told not to)."""
    registry = TypeRegistry()
    registry.register_type(
        ItemType(
            name=TYPE_NAME,
            model=NoopItem,
            decider=decide,
            executors={"noop": run_noop},
            cheap_actions=frozenset({"noop"}) if cheap else frozenset(),
        )
    )
    return registry


# ----------------------------------------------------------------------------- helpers


def percentile(sorted_values: list[float], fraction: float) -> float:
    """Nearest-rank percentile of an already sorted list (NaN when empty)."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(fraction * len(sorted_values)))
    return sorted_values[rank - 1]


@dataclass
class Latency:
    """Percentiles of one interval, in milliseconds."""

    count: int
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float

    @classmethod
    def of(cls, seconds: list[float]) -> Latency:
        values = sorted(seconds)
        return cls(
            count=len(values),
            p50_ms=percentile(values, 0.50) * 1000,
            p90_ms=percentile(values, 0.90) * 1000,
            p99_ms=percentile(values, 0.99) * 1000,
            max_ms=(values[-1] if values else math.nan) * 1000,
        )


@dataclass
class WqResult:
    """What one wq run measured."""

    phase: str
    items: int
    projects: int
    workers: int
    batch: int
    rate: float | None
    replicas: int
    processes: int
    cheap: bool
    submit_seconds: float
    submit_per_second: float
    process_seconds: float
    items_per_second: float
    wall_seconds: float
    cpu_seconds: float
    cpu_ms_per_item: float
    database_cpu_ms_per_item: float
    machine_cores_busy: float | None
    latency: dict[str, Latency]
    statements_per_item: dict[str, dict[str, float]] = field(default_factory=dict)
    anomalies: list[str] = field(default_factory=list)


@dataclass
class PeerResult:
    """One comparison queue: jobs drained per second, or why it was skipped."""

    name: str
    jobs: int
    seconds: float | None = None
    jobs_per_second: float | None = None
    skipped: str | None = None


def checkpoint(url: str) -> None:
    """Flush dirty buffers so one phase's writes do not land in the next one's timing."""
    with contextlib.suppress(psycopg.Error), psycopg.connect(libpq_url(url)) as conn:
        conn.autocommit = True
        conn.execute("CHECKPOINT")


def wq_source() -> str:
    """Which wq was measured: the git commit of the imported package, and if it was dirty."""
    import subprocess

    import wq

    root = os.path.dirname(os.path.dirname(os.path.abspath(wq.__file__)))
    try:
        commit = subprocess.run(
            ["git", "-C", root, "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", root, "status", "--porcelain", "--untracked-files=no", "--", "wq"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return f"{root} (not a git checkout)"
    return f"{root} @ {commit}" + (" + uncommitted changes in wq/" if dirty else "")


def machine_cpu() -> tuple[float, float] | None:
    """(busy, total) CPU seconds of the whole machine so far, from /proc/stat (Linux)."""
    try:
        with open("/proc/stat") as stat:
            fields = [float(value) for value in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    tick = os.sysconf("SC_CLK_TCK")
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)
    total = sum(fields[:8])
    return (total - idle) / tick, total / tick


def database_cpu(database: str) -> dict[int, float]:
    """CPU seconds so far of each PostgreSQL backend serving `database` (Linux, same host).

    Backends show the database in their process title.
    """
    found: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                title = cmdline.read().decode(errors="replace").split()
            # "postgres: [CLUSTER:] USER DB HOST STATE"
            if not title or title[0] != "postgres:" or database not in title[1:4]:
                continue
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        found[int(entry)] = (float(fields[11]) + float(fields[12])) / tick
    return found


def server_version(url: str) -> str:
    if url.startswith("sqlite"):
        import sqlite3

        return f"none: SQLite {sqlite3.sqlite_version}"
    with psycopg.connect(libpq_url(url)) as conn:
        row = conn.execute("SHOW server_version").fetchone()
    return str(row[0]) if row else "?"


# ----------------------------------------------------------------------------- profiling


class ThreadProfiler:
    """cProfile for every thread started while installed (cProfile alone sees one thread).

    The manager's scheduler, heartbeat, sweep and pool workers are plain threads, so
    `Thread.run` is wrapped to profile each one; the stats are merged into one file
    that `python -m pstats` or snakeviz can read.
    """

    def __init__(self) -> None:
        self._profiles: list[cProfile.Profile] = []
        self._lock = threading.Lock()
        self._original = threading.Thread.run
        self._main = cProfile.Profile()

    def start(self) -> None:
        original, profiles, lock = self._original, self._profiles, self._lock

        def run(thread: threading.Thread) -> None:
            profile = cProfile.Profile()
            with lock:
                profiles.append(profile)
            profile.enable()
            try:
                original(thread)
            finally:
                profile.disable()

        threading.Thread.run = run  # type: ignore[method-assign]
        self._main.enable()

    def stop(self, path: str) -> None:
        self._main.disable()
        threading.Thread.run = self._original  # type: ignore[method-assign]
        stats = pstats.Stats(self._main)
        with self._lock:
            for profile in self._profiles:
                with contextlib.suppress(TypeError):  # a profile that saw no call
                    stats.add(profile)
        stats.dump_stats(path)


def _autocommit(conn: Any) -> bool:
    return bool(conn.get_execution_options().get("isolation_level") == "AUTOCOMMIT")


# Counted, but not a round trip: a BEGIN sent in one flight with its transaction's first
# statement (psycopg pipeline mode, `wq.engine.pipelined`).
PIPELINED = "(no round trip) BEGIN sent with the first statement"


def _in_transaction(conn: Any) -> bool | None:
    """Whether psycopg's connection is in a transaction (None: not psycopg)."""
    driver = getattr(conn.connection, "driver_connection", None)
    if not isinstance(driver, psycopg.Connection):
        return None
    return bool(driver.info.transaction_status != psycopg.pq.TransactionStatus.IDLE)


class StatementCounter:
    """Round trips the engine makes: statements by kind, plus BEGIN, COMMIT and pings."""

    def __init__(self, engine: Engine) -> None:
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        event.listen(engine, "before_cursor_execute", self._statement)
        event.listen(engine, "begin", self._begin)
        event.listen(engine, "commit", self._commit)
        event.listen(engine, "rollback", self._rollback)
        # The pool pings a connection only when it sat idle (wq.engine.db): count pings.
        ping = engine.dialect.do_ping

        def counted_ping(dbapi_connection: Any) -> bool:
            self._add("pool ping of an idle connection (SELECT 1)")
            return bool(ping(dbapi_connection))

        engine.dialect.do_ping = counted_ping  # type: ignore[method-assign]
        # The audit rows go in with COPY or an INSERT on the driver's connection, which
        # SQLAlchemy's events do not see: count them too, on this engine's connections
        # (PostgreSQL's: sqlite3 connections cannot be weakly referenced, and SQLite's
        # audit rows go through SQLAlchemy).
        if engine.dialect.name != "postgresql":
            return
        mine: weakref.WeakSet[Any] = weakref.WeakSet()
        event.listen(
            engine, "connect", lambda dbapi_connection, _record: mine.add(dbapi_connection)
        )

        def count_driver_statement(cursor: Any, key: str) -> None:
            driver = cursor.connection
            idle = driver.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
            if idle and not driver.autocommit:
                self._add("BEGIN")  # psycopg sends it ahead of the statement
            self._add(key)

        copy = psycopg.Cursor.copy
        executemany = psycopg.Cursor.executemany
        # Absent from a checkout measured from before it (its audit INSERT went through
        # SQLAlchemy, whose events count it); private in a few.
        driver_insert = getattr(audit, "INSERT_AUDIT", getattr(audit, "_INSERT_AUDIT", None))

        def counted_copy(cursor: Any, statement: Any, *args: Any, **kwargs: Any) -> Any:
            if cursor.connection in mine:
                count_driver_statement(cursor, "COPY audit_log")
            return copy(cursor, statement, *args, **kwargs)

        def counted_executemany(cursor: Any, statement: Any, *args: Any, **kwargs: Any) -> Any:
            # SQLAlchemy's own executemany calls are counted by its events.
            if cursor.connection in mine and statement == driver_insert:
                count_driver_statement(cursor, "INSERT INTO audit_log")
            return executemany(cursor, statement, *args, **kwargs)

        psycopg.Cursor.copy = counted_copy  # type: ignore[method-assign]
        psycopg.Cursor.executemany = counted_executemany  # type: ignore[method-assign]

    def _add(self, key: str) -> None:
        with self._lock:
            self.counts[key] += 1

    def _statement(self, conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        # psycopg sends BEGIN before the first statement of a transaction (not when
        # SQLAlchemy begins one, which sends nothing): counted here, as it goes out.
        driver = getattr(conn.connection, "driver_connection", None)
        if _in_transaction(conn) is False and not getattr(driver, "autocommit", True):
            context = args[1] if len(args) > 1 else None
            options = getattr(context, "execution_options", {}) or {}
            self._add(PIPELINED if options.get("wq_pipelined_begin") else "BEGIN")
        words = " ".join(statement.split())
        if words.startswith(("INSERT", "UPDATE", "DELETE")):
            key = " ".join(words.split()[:3])
        elif words.startswith(("SAVEPOINT", "RELEASE SAVEPOINT", "ROLLBACK TO")):
            key = words.rsplit(" ", 1)[0]
        elif words.startswith("WITH RECURSIVE"):
            key = "WITH RECURSIVE (projects_with_queued)"
        elif words.startswith("WITH released AS"):
            key = "WITH released (release, audit rows, NOTIFY)"
        elif "pg_notify" in words:
            key = "SELECT pg_notify"
        elif "pg_advisory_xact_lock" in words:
            key = "SELECT pg_advisory_xact_lock"
        elif "nextval" in words:
            key = "SELECT nextval"
        elif words.startswith("SELECT") and " FROM " in words:
            key = "SELECT ... FROM " + words.split(" FROM ", 1)[1].split()[0]
        else:
            key = words[:40]
        self._add(key)

    def _begin(self, conn: Any) -> None:
        # psycopg: counted with the statement that sends it; in autocommit none is sent.
        if _in_transaction(conn) is None and not _autocommit(conn):
            self._add("BEGIN")

    def _commit(self, conn: Any) -> None:
        # psycopg sends no COMMIT for a transaction that sent nothing, nor in autocommit.
        if _in_transaction(conn) is not False and not _autocommit(conn):
            self._add("COMMIT")

    def _rollback(self, conn: Any) -> None:
        if _in_transaction(conn) is not False:
            self._add("ROLLBACK")

    def snapshot(self) -> Counter[str]:
        with self._lock:
            return Counter(self.counts)


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


def count_idle(engine: Engine) -> tuple[int, dict[str, int]]:
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT admission, count(*) FROM work_items WHERE type = :type GROUP BY admission"
            ),
            {"type": TYPE_NAME},
        ).all()
    states = {str(state): int(count) for state, count in rows}
    return states.get("idle", 0), states


def wait_until_idle(engine: Engine, items: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        idle, states = count_idle(engine)
        if idle >= items:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {idle}/{items} items idle after {timeout:.0f} s: {states}")
        time.sleep(0.1)


AUDIT_TIMES = text(
    """
    SELECT a.work_item_id,
           min(a.at) FILTER (WHERE a.event_type IN ('created', 'queued')) AS queued_at,
           min(a.at) FILTER (WHERE a.event_type = 'admitted') AS admitted_at,
           min(a.at) FILTER (WHERE a.event_type = 'action_completed') AS acted_at,
           max(a.at) FILTER (WHERE a.event_type = 'released'
                             AND a.new_state ->> 'admission' = 'idle') AS idle_at,
           count(*) FILTER (WHERE a.event_type = 'action_completed') AS actions,
           count(*) FILTER (WHERE a.event_type = 'released') AS releases
      FROM audit_log a
      JOIN work_items w ON w.id = a.work_item_id
     WHERE w.type = :type
     GROUP BY a.work_item_id
    """
)


def _timestamp(value: Any) -> Any:
    """SQLite hands text() timestamps back as naive UTC strings."""
    if isinstance(value, str):
        parsed = datetime.fromisoformat(value)
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    return value


def _with_times(row: Any) -> Any:
    from types import SimpleNamespace

    return SimpleNamespace(
        **{key: _timestamp(value) if key.endswith("_at") else value for key, value in row.items()}
    )


def analyse(engine: Engine, items: int) -> tuple[dict[str, Any], list[str]]:
    """Per-item times from the audit log, and anything that does not look right."""
    with engine.connect() as conn:
        rows = conn.execute(AUDIT_TIMES, {"type": TYPE_NAME}).all()
        dims = conn.execute(
            text(
                "SELECT s.status, count(*) FROM work_item_statuses s "
                "JOIN work_items w ON w.id = s.work_item_id "
                "WHERE w.type = :type AND s.dimension = :dim GROUP BY s.status"
            ),
            {"type": TYPE_NAME, "dim": DIMENSION},
        ).all()
        other = conn.execute(
            text(
                "SELECT event_type, count(*) FROM audit_log a JOIN work_items w "
                "ON w.id = a.work_item_id WHERE w.type = :type AND event_type NOT IN "
                "('created', 'queued', 'admitted', 'action_completed', 'released') "
                "GROUP BY event_type"
            ),
            {"type": TYPE_NAME},
        ).all()
    rows = [_with_times(row._mapping) for row in rows]
    anomalies: list[str] = []
    if len(rows) != items:
        anomalies.append(f"audit rows found for {len(rows)} items, expected {items}")
    extra_actions = sum(1 for row in rows if row.actions != 1)
    if extra_actions:
        anomalies.append(f"{extra_actions} items did not run `noop` exactly once")
    extra_releases = sum(1 for row in rows if row.releases != 1)
    if extra_releases:
        anomalies.append(f"{extra_releases} items were released more than once or never")
    dim_counts = {str(status): int(count) for status, count in dims}
    if dim_counts.get("false", 0) != items or len(dim_counts) != 1:
        anomalies.append(f"needs_noop statuses: {dim_counts}")
    for event_type, count in other:
        anomalies.append(f"unexpected audit events: {event_type} x{count}")
    missing = [row for row in rows if row.queued_at is None or row.idle_at is None]
    if missing:
        anomalies.append(f"{len(missing)} items lack a queued or idle audit row")
    good = [row for row in rows if row.queued_at is not None and row.idle_at is not None]
    times = {
        "first_queued": min((row.queued_at for row in good), default=None),
        "last_queued": max((row.queued_at for row in good), default=None),
        "last_idle": max((row.idle_at for row in good), default=None),
        "first_admitted": min(
            (row.admitted_at for row in good if row.admitted_at is not None), default=None
        ),
    }

    def span(start: str, end: str) -> list[float]:
        values = []
        for row in good:
            first, last = getattr(row, start), getattr(row, end)
            if first is not None and last is not None:
                values.append((last - first).total_seconds())
        return values

    latency = {
        "queued_to_idle": Latency.of(span("queued_at", "idle_at")),
        "queued_to_admitted": Latency.of(span("queued_at", "admitted_at")),
        "queued_to_action_done": Latency.of(span("queued_at", "acted_at")),
        "admitted_to_idle": Latency.of(span("admitted_at", "idle_at")),
    }
    return {"times": times, "latency": latency}, anomalies


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


def per_item(counts: Counter[str], items: int) -> dict[str, float]:
    """Statement counts divided by the number of items, largest first, with a total."""
    result = {key: round(count / items, 2) for key, count in counts.most_common()}
    trips = sum(count for key, count in counts.items() if key != PIPELINED)
    result["TOTAL round trips"] = round(trips / items, 2)
    return result


# ----------------------------------------------------------------------------- baseline


def run_raw_baseline(url: str, jobs: int, threads: int) -> PeerResult:
    """DESIGN's floor: one row claimed (SKIP LOCKED) and completed per round trip pair."""
    dsn = libpq_url(url)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {RAW_TABLE}")
        conn.execute(
            f"CREATE TABLE {RAW_TABLE} (id bigserial PRIMARY KEY, "
            "status text NOT NULL DEFAULT 'queued', payload jsonb NOT NULL DEFAULT '{}', "
            "created_at timestamptz NOT NULL DEFAULT now(), done_at timestamptz)"
        )
        conn.execute(f"CREATE INDEX ON {RAW_TABLE} (id) WHERE status = 'queued'")
        conn.execute(
            f"INSERT INTO {RAW_TABLE} (payload) SELECT '{{}}' FROM generate_series(1, %s)",
            (jobs,),
        )
        conn.execute(f"ANALYZE {RAW_TABLE}")
    checkpoint(url)
    claim = (
        f"UPDATE {RAW_TABLE} SET status = 'running' WHERE id = ("
        f"SELECT id FROM {RAW_TABLE} WHERE status = 'queued' ORDER BY id "
        "LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING id"
    )
    complete = f"UPDATE {RAW_TABLE} SET status = 'done', done_at = now() WHERE id = %s"
    barrier = threading.Barrier(threads + 1)
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            with psycopg.connect(dsn, autocommit=True, prepare_threshold=0) as conn:
                barrier.wait()
                while True:
                    row = conn.execute(claim).fetchone()
                    if row is None:
                        return
                    conn.execute(complete, row)
        except BaseException as err:  # reported after the run
            errors.append(err)
            with contextlib.suppress(threading.BrokenBarrierError):
                barrier.abort()

    pool = [threading.Thread(target=worker, name=f"raw-{n}") for n in range(threads)]
    for thread in pool:
        thread.start()
    barrier.wait()
    started = time.monotonic()
    for thread in pool:
        thread.join()
    seconds = time.monotonic() - started
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(f"SELECT count(*) FROM {RAW_TABLE} WHERE status = 'done'").fetchone()
        conn.execute(f"DROP TABLE {RAW_TABLE}")
    done = int(row[0]) if row else 0
    if errors or done != jobs:
        failure = f"failed: {errors[:1]}, {done} of {jobs} done"
        return PeerResult(RAW_NAME, jobs, skipped=failure)
    return PeerResult(RAW_NAME, jobs, seconds, jobs / seconds)


def run_pgqueuer(url: str, jobs: int, concurrency: int, driver: str) -> PeerResult:
    """pgqueuer draining pre-enqueued no-op jobs (`mode=drain`); skipped when absent."""
    name = f"pgqueuer ({driver})"
    needs = ["pgqueuer", driver]
    missing = [module for module in needs if importlib.util.find_spec(module) is None]
    if missing:
        return PeerResult(name, jobs, skipped=f"not installed (pip install {' '.join(needs)})")
    try:
        return asyncio.run(_pgqueuer(url, jobs, concurrency, driver, name))
    except Exception as err:
        return PeerResult(name, jobs, skipped=f"failed: {type(err).__name__}: {err}")


async def _pgqueuer(url: str, jobs: int, concurrency: int, driver: str, name: str) -> PeerResult:
    from pgqueuer import QueueManager
    from pgqueuer.models import Job
    from pgqueuer.queries import Queries
    from pgqueuer.types import QueueExecutionMode

    dsn = libpq_url(url)

    @contextlib.asynccontextmanager
    async def connect() -> Any:
        if driver == "asyncpg":
            import asyncpg
            from pgqueuer.db import AsyncpgDriver

            conn = await asyncpg.connect(dsn)
            try:
                yield AsyncpgDriver(conn)
            finally:
                await conn.close()
        else:
            from pgqueuer.db import PsycopgDriver

            aconn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
            try:
                yield PsycopgDriver(aconn)
            finally:
                await aconn.close()

    async with connect() as setup:
        queries = Queries(setup)
        with contextlib.suppress(Exception):
            await queries.uninstall()
        await queries.install()
        for start in range(0, jobs, 1000):
            size = min(1000, jobs - start)
            await queries.enqueue(["noop"] * size, [None] * size, [0] * size)
    checkpoint(url)
    done = 0
    try:
        async with connect() as worker:
            manager = QueueManager(Queries(worker))

            @manager.entrypoint("noop")
            async def noop(job: Job) -> None:
                nonlocal done
                done += 1

            started = time.monotonic()
            await asyncio.wait_for(
                manager.run(batch_size=concurrency, mode=QueueExecutionMode.drain), timeout=900
            )
            seconds = time.monotonic() - started
    finally:
        async with connect() as teardown:
            await Queries(teardown).uninstall()
    if done != jobs:
        return PeerResult(name, jobs, skipped=f"ran {done} of {jobs} jobs")
    return PeerResult(name, jobs, seconds, jobs / seconds)


def run_pgqueuer_asyncpg(url: str, jobs: int, concurrency: int) -> PeerResult:
    return run_pgqueuer(url, jobs, concurrency, "asyncpg")


def run_pgqueuer_psycopg(url: str, jobs: int, concurrency: int) -> PeerResult:
    return run_pgqueuer(url, jobs, concurrency, "psycopg")


PROCRASTINATE_SCHEMA = "wq_bench_procrastinate"


def run_procrastinate(url: str, jobs: int, concurrency: int) -> PeerResult:
    """procrastinate's async worker (`wait=False`) draining pre-deferred no-op jobs."""
    name = "procrastinate (psycopg)"
    if importlib.util.find_spec("procrastinate") is None:
        return PeerResult(name, jobs, skipped="not installed (pip install procrastinate)")
    dsn = libpq_url(url)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {PROCRASTINATE_SCHEMA} CASCADE")
        conn.execute(f"CREATE SCHEMA {PROCRASTINATE_SCHEMA}")
    try:
        return asyncio.run(_procrastinate(dsn, jobs, concurrency, name))
    except Exception as err:
        return PeerResult(name, jobs, skipped=f"failed: {type(err).__name__}: {err}")
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {PROCRASTINATE_SCHEMA} CASCADE")


async def _procrastinate(dsn: str, jobs: int, concurrency: int, name: str) -> PeerResult:
    import procrastinate

    logging.getLogger("procrastinate").setLevel(logging.ERROR)
    connector = procrastinate.PsycopgConnector(
        conninfo=dsn,
        kwargs={"options": f"-c search_path={PROCRASTINATE_SCHEMA}"},
        max_size=concurrency + 2,
    )
    app = procrastinate.App(connector=connector)
    done = 0

    @app.task(name="noop")
    async def noop() -> None:
        nonlocal done
        done += 1

    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        for start in range(0, jobs, 1000):
            await noop.batch_defer_async(*({} for _ in range(min(1000, jobs - start))))
        started = time.monotonic()
        await asyncio.wait_for(
            app.run_worker_async(
                concurrency=concurrency, wait=False, install_signal_handlers=False
            ),
            timeout=900,
        )
        seconds = time.monotonic() - started
    if done != jobs:
        return PeerResult(name, jobs, skipped=f"ran {done} of {jobs} jobs")
    return PeerResult(name, jobs, seconds, jobs / seconds)


PEERS: dict[str, Callable[[str, int, int], PeerResult]] = {
    "raw": run_raw_baseline,
    "pgqueuer": run_pgqueuer_asyncpg,
    "pgqueuer-psycopg": run_pgqueuer_psycopg,
    "procrastinate": run_procrastinate,
}


# ----------------------------------------------------------------------------- output


def fmt(value: float | None, digits: int = 0) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:,.{digits}f}"


def render(
    report: dict[str, Any], result: WqResult, peers: list[PeerResult], *, verbose: bool
) -> None:
    """A small table on stdout (rich when available)."""
    rows: list[tuple[str, str]] = [
        ("machine", f"{report['cpus']} cores, PostgreSQL {report['postgres']}"),
        ("wq measured", report["wq_source"]),
        ("load average", f"{report['load_before']:.2f} before, {report['load_after']:.2f} after"),
        ("logging", report["logging"]),
        (
            "wq run",
            f"{result.items:,} items, {result.projects} projects, {result.workers} workers, "
            f"phase {result.phase}, batch {result.batch}"
            + (f", rate {result.rate:g}/s" if result.rate else "")
            + (f", {result.replicas} replicas" if result.replicas > 1 else "")
            + (f", {result.processes} processes" if result.processes > 1 else "")
            + ("" if result.cheap else ", no-op not cheap (worker threads)"),
        ),
        (
            "submit",
            f"{fmt(result.submit_seconds, 2)} s ({fmt(result.submit_per_second)} items/s)",
        ),
        (
            "wq throughput",
            f"{fmt(result.items_per_second)} items/s ({fmt(result.process_seconds, 2)} s)",
        ),
        (
            "wq process CPU",
            f"{fmt(result.cpu_seconds, 2)} s over {fmt(result.wall_seconds, 2)} s wall, "
            f"{fmt(result.cpu_ms_per_item, 2)} ms/item",
        ),
        (
            "PostgreSQL CPU",
            f"{fmt(result.database_cpu_ms_per_item, 2)} ms/item (its backends for this database)"
            if not str(report["postgres"]).startswith("none")
            else "-",
        ),
        (
            "machine CPU",
            f"{fmt(result.machine_cores_busy, 2)} of {report['cpus']} cores busy "
            f"(wq process {fmt(result.cpu_seconds / result.wall_seconds, 2)}, "
            "the rest is PostgreSQL and anything else running)",
        ),
    ]
    for key, lat in result.latency.items():
        rows.append(
            (
                key.replace("_", " "),
                f"p50 {fmt(lat.p50_ms, 1)} ms  p90 {fmt(lat.p90_ms, 1)} ms  "
                f"p99 {fmt(lat.p99_ms, 1)} ms  max {fmt(lat.max_ms, 1)} ms",
            )
        )
    for peer in peers:
        if peer.skipped:
            rows.append((peer.name, f"skipped: {peer.skipped}"))
        else:
            ratio = result.items_per_second / peer.jobs_per_second if peer.jobs_per_second else 0
            rows.append(
                (
                    peer.name,
                    f"{fmt(peer.jobs_per_second)} jobs/s ({fmt(peer.seconds, 2)} s); "
                    f"wq = {ratio:.2f}x",
                )
            )
    for section, counts in result.statements_per_item.items():
        rows.append((f"round trips/item ({section})", fmt(counts.get("TOTAL round trips"), 1)))
        if verbose:
            rows.extend(
                (f"  {key}", fmt(value, 2))
                for key, value in counts.items()
                if key != "TOTAL round trips"
            )
    for anomaly in result.anomalies:
        rows.append(("ANOMALY", anomaly))
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        width = max(len(name) for name, _ in rows)
        for name, value in rows:
            print(f"{name:<{width}}  {value}")
        return
    table = Table(title="wq no-op throughput", show_header=False)
    table.add_column(style="bold")
    table.add_column()
    for name, value in rows:
        table.add_row(name, value)
    Console().print(table)


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {key: _jsonable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_jsonable(item) for item in value]
    return value


# ----------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="wq end-to-end no-op throughput on PostgreSQL (a measurement, not a test)"
    )
    parser.add_argument("--items", type=int, default=10_000, help="no-op items (default 10000)")
    parser.add_argument("--projects", type=int, default=100, help="projects (default 100)")
    parser.add_argument("--workers", type=int, default=10, help="processing workers (10)")
    parser.add_argument(
        "--phase",
        choices=("overlap", "submit-first"),
        default="overlap",
        help="overlap: submit while processing (default); submit-first: drain a backlog",
    )
    parser.add_argument("--batch", type=int, default=500, help="items per submit transaction")
    parser.add_argument(
        "--rate", type=float, default=None, help="pace submissions to this many items/s"
    )
    parser.add_argument(
        "--poll-interval", type=float, default=0.2, help="processing.poll_interval_seconds"
    )
    parser.add_argument("--no-listen", action="store_true", help="do not run LISTEN/NOTIFY")
    parser.add_argument(
        "--replicas",
        type=int,
        default=1,
        help="processing managers on the database, each with its own engine and LISTEN (1)",
    )
    parser.add_argument(
        "--processes",
        type=int,
        default=1,
        help="also run N-1 managers in child processes (several daemons on one database)",
    )
    parser.add_argument(
        "--no-cheap",
        action="store_true",
        help="do not mark the no-op action cheap: every item runs on a worker thread",
    )
    parser.add_argument(
        "--switch-interval",
        type=float,
        default=None,
        help="sys.setswitchinterval for the run (Python's default is 0.005 s)",
    )
    parser.add_argument(
        "--quiet-logging",
        action="store_true",
        help="log nothing (by default the run logs as `wq daemon` does, into /dev/null:"
        " every audit row a line)",
    )
    parser.add_argument(
        "--database-url",
        default=None,
        help="measure in this (PostgreSQL) database; default: a throwaway wq_bench_<pid>",
    )
    add_admin_url(parser)
    parser.add_argument("--keep-database", action="store_true", help="do not drop it afterwards")
    parser.add_argument(
        "--peers",
        default="raw,pgqueuer,pgqueuer-psycopg,procrastinate",
        help="comparison queues, comma-separated, or none (default: all of them)",
    )
    parser.add_argument(
        "--peer-threads", type=int, default=10, help="threads/concurrency of the peers (10)"
    )
    parser.add_argument("--timeout", type=float, default=900.0, help="give up after N s")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead")
    parser.add_argument(
        "--statements", action="store_true", help="list the round trips per item by statement"
    )
    parser.add_argument(
        "--profile",
        metavar="PATH",
        default=None,
        help="cProfile every thread of the wq phase into PATH (pstats format); slows it down",
    )
    args = parser.parse_args(argv)
    if args.items <= 0 or args.projects <= 0 or args.workers <= 0 or args.batch <= 0:
        parser.error("--items, --projects, --workers and --batch must be positive")
    peers = [] if args.peers in ("", "none") else args.peers.split(",")
    unknown = [peer for peer in peers if peer not in PEERS]
    if unknown:
        parser.error(f"unknown peer(s) {', '.join(unknown)}; known: {', '.join(PEERS)}")
    args.peer_list = peers
    return args


def main(argv: list[str] | None = None) -> int:
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
            on_phase(f"peer {peer}: {args.items} jobs, {args.peer_threads} threads")
            peers.append(PEERS[peer](url, args.items, args.peer_threads))
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
        document = {
            **report,
            "wq": asdict(result),
            "peers": [
                {
                    **asdict(peer),
                    "wq_ratio": (
                        result.items_per_second / peer.jobs_per_second
                        if peer.jobs_per_second
                        else None
                    ),
                }
                for peer in peers
            ],
        }
        print(json.dumps(_jsonable(document), indent=2, default=str))
    else:
        render(report, result, peers, verbose=args.statements)
    return 1 if result.anomalies else 0


if __name__ == "__main__":
    sys.exit(main())
