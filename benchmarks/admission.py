#!/usr/bin/env python
"""The time of ONE admission pass over a large backlog, on PostgreSQL.

For each backlog size (default 1k, 10k and 100k queued items spread over 100 projects)
`work_items` is rebuilt with one bulk `INSERT ... SELECT generate_series` (admission
'queued', a fresh `wq_admission_seq` value per item in insertion order, lane 'normal'
except one round of projects in 20, which is 'alert'; optionally `--done-items` of
finished history first) and VACUUM ANALYZEd. Then `wq.engine.admission.dispatch` - the
real dispatcher: a skip scan for the projects with queued work, then, in one
transaction, the admission lock and one statement that counts every lane's in-flight
items, admits its heads and writes their audit rows, and the NOTIFY - is timed.
Before every pass, outside the timing, admitted items go back to 'queued' with their
old seq (so every pass admits the same items), the audit log is emptied and work_items
is VACUUMed.

The pool is N=10, M=1: a pass admits at most 11 items per project (1,100); at 1k a
project has only 10 items and the pass admits all 1,000. (The daemon's pass admits
about `ADMISSIONS_PER_PASS` items at most, shared among its projects; the script raises
that bound so that one pass fills every pool, as it measures.) DESIGN.md: the cost of a
pass must grow with the items admitted, not with the backlog; goal: 100k/1k ratio under
2x.

Sizes are measured in interleaved rounds (1k, 10k, 100k, 1k, ...) so that load from
other processes hits every size alike, each round on a fresh connection so that the
plan cache starts empty. psycopg prepares a statement server-side from its 6th run on a
connection, after which PostgreSQL may switch it to a generic plan (plan_cache_mode
auto); the table shows how many admit UPDATEs / in-flight counts ran a generic plan, and
an extra case re-times the largest size with plan_cache_mode=force_generic_plan, the
worst case a long-lived connection can end up with.

The report: median ms per pass, items admitted, the split of the pass by statement, the
pass right after (nothing admissible), the 100k/1k ratio, and EXPLAIN (ANALYZE,
BUFFERS) of the three statements of a pass at the largest size - the skip scan, the
in-flight count, the normal-lane admit UPDATE - as custom and as generic plan, with the
indexes used and any sequential scan of work_items.

This is a measurement, never a test: nothing here asserts a target (the exit status is
1 only when a pass admitted a wrong number of items or broke a pool bound).

    python benchmarks/admission.py
    python benchmarks/admission.py --sizes 1000,100000 --rounds 9 --json
    python benchmarks/admission.py --done-items 300000     # with finished history
    python benchmarks/admission.py --database-url postgresql://postgres@127.0.0.1/wq_scratch
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from databases import add_admin_url, bench_database
from sqlalchemy import Engine, event, text
from sqlalchemy.engine import make_url

# EXPLAIN and its reading are shared with the test that guards the admission plan.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.support.plans import Plan, explain
from wq.engine import admission, schema
from wq.engine.admission import dispatch
from wq.engine.config import Config, parse_config
from wq.engine.db import make_engine, make_sessionmaker
from wq.engine.models import ALERT_LANE, NORMAL_LANE, utcnow

TYPE_NAME = "bench"
CAPACITY = 10
ALERT_CAPACITY = 1

# The statements of a pass, recognised by their SQL text (first match wins).
CATEGORIES: tuple[tuple[str, str], ...] = (
    ("skip-scan", "WITH RECURSIVE"),
    ("lock", "pg_advisory_xact_lock"),
    # The set-based admit UPDATE counts in-flight items inside it: match it first.
    ("admit", "UPDATE work_items"),
    ("in-flight", "count("),
    ("audit", "INSERT INTO audit_log"),
    ("notify", "pg_notify"),
)
EXPLAINED = ("skip-scan", "in-flight", "admit")

# ----------------------------------------------------------------------------- database


FILL_SQL = f"""
INSERT INTO work_items (
    id, type, project, phase, attempts, admission, seq, lane, autonomous,
    queued_at, created_at, updated_at
)
SELECT
    gen_random_uuid(),
    '{TYPE_NAME}',
    'bench/project-' || lpad((g.i % :projects)::text, 3, '0'),
    'active',
    0,
    'queued',
    nextval('wq_admission_seq'),
    CASE WHEN (g.i / :projects) % :alert_every = 0 THEN '{ALERT_LANE}' ELSE '{NORMAL_LANE}' END,
    false,
    now(), now(), now()
FROM (SELECT i FROM generate_series(0, :items - 1) AS s(i) ORDER BY i) AS g
"""

# Finished history: terminal items that no admission statement should ever read.
HISTORY_SQL = """
INSERT INTO work_items (
    id, type, project, phase, attempts, admission, seq, lane, autonomous,
    queued_at, admitted_at, created_at, updated_at
)
SELECT
    gen_random_uuid(), :type, 'bench/project-' || lpad((i % :projects)::text, 3, '0'),
    'completed', 1, 'done', nextval('wq_admission_seq'), :lane, false,
    now(), now(), now(), now()
FROM generate_series(0, :done - 1) AS s(i)
"""


def fill(engine: Engine, items: int, projects: int, alert_every: int, done: int = 0) -> float:
    """Replace the backlog by `items` queued items; seconds taken (insert + ANALYZE).

    Item i goes to project i % projects; the whole round i // projects is 'alert' every
    `alert_every` rounds (round 0 included, so every project has an alert at its head).
    `done` finished items (phase completed, admission done) are inserted first.
    """
    started = time.perf_counter()
    with engine.begin() as conn:
        conn.execute(text("TRUNCATE work_items, audit_log CASCADE"))
        if done:
            conn.execute(
                text(HISTORY_SQL),
                {"type": TYPE_NAME, "projects": projects, "lane": NORMAL_LANE, "done": done},
            )
        conn.execute(
            text(FILL_SQL), {"items": items, "projects": projects, "alert_every": alert_every}
        )
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM (ANALYZE) work_items"))
        conn.execute(text("ANALYZE audit_log"))
    return time.perf_counter() - started


def reset(engine: Engine, vacuum: bool) -> int:
    """Put admitted items back to queued (same seq) and empty the audit log."""
    with engine.begin() as conn:
        result = conn.execute(
            text(
                "UPDATE work_items SET admission = 'queued', admitted_at = NULL "
                "WHERE admission = 'admitted'"
            )
        )
        conn.execute(text("TRUNCATE audit_log"))
        count = int(result.rowcount)
    if vacuum:
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text("VACUUM work_items"))
    return count


def expected_admissions(engine: Engine) -> int:
    """What one pass over the current backlog must admit: per project min(alert, M) +
    min(normal, N)."""
    with engine.begin() as conn:
        return int(
            conn.execute(
                text(
                    "SELECT coalesce(sum(least(n, CASE lane WHEN :alert THEN :m ELSE :cap END)), 0)"
                    " FROM (SELECT project, lane, count(*) AS n FROM work_items"
                    "       WHERE admission = 'queued' GROUP BY project, lane) AS q"
                ),
                {"alert": ALERT_LANE, "m": ALERT_CAPACITY, "cap": CAPACITY},
            ).scalar_one()
        )


def in_flight_violations(engine: Engine) -> int:
    """(project, lane) pairs holding more admitted items than their pool allows."""
    with engine.begin() as conn:
        return int(
            conn.execute(
                text(
                    "SELECT count(*) FROM (SELECT project, lane, count(*) AS n FROM work_items"
                    " WHERE admission = 'admitted' GROUP BY project, lane) AS a"
                    " WHERE n > CASE lane WHEN :alert THEN :m ELSE :cap END"
                ),
                {"alert": ALERT_LANE, "m": ALERT_CAPACITY, "cap": CAPACITY},
            ).scalar_one()
        )


def table_sizes(engine: Engine) -> dict[str, int]:
    """Bytes of work_items and of its admission indexes."""
    with engine.begin() as conn:
        rows = conn.execute(
            text(
                "SELECT relname, pg_relation_size(oid) FROM pg_class WHERE relname IN "
                "('work_items', 'ix_work_items_queue', 'ix_work_items_in_flight')"
            )
        )
        return {name: int(size) for name, size in rows}


# ----------------------------------------------------------------------------- statements


class StatementClock:
    """Times every statement the engine runs, by category; keeps one sample of each."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: Counter[str] = Counter()
        self.samples: dict[str, list[tuple[str, Any]]] = defaultdict(list)
        self.capture = False
        event.listen(engine, "before_cursor_execute", self._before)
        event.listen(engine, "after_cursor_execute", self._after)

    @staticmethod
    def category(statement: str) -> str:
        for name, marker in CATEGORIES:
            if marker in statement:
                return name
        return "other"

    def _before(self, conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        conn.info.setdefault("bench_started", []).append(time.perf_counter())

    def _after(self, conn: Any, cursor: Any, statement: str, parameters: Any, *args: Any) -> None:
        elapsed = time.perf_counter() - conn.info["bench_started"].pop()
        name = self.category(statement)
        self.seconds[name] += elapsed
        self.calls[name] += 1
        if self.capture:
            self.samples[name].append((statement, parameters))

    def clear(self) -> None:
        self.seconds.clear()
        self.calls.clear()
        self.samples.clear()

    def close(self) -> None:
        event.remove(self.engine, "before_cursor_execute", self._before)
        event.remove(self.engine, "after_cursor_execute", self._after)


# ----------------------------------------------------------------------------- passes

AUTO = "auto"
GENERIC = "force_generic_plan"


def mode_url(url: str, mode: str) -> str:
    """The URL whose connections run with this plan_cache_mode."""
    if mode == AUTO:
        return url
    parsed = make_url(url)
    return parsed.update_query_dict({"options": f"-c plan_cache_mode={mode}"}).render_as_string(
        hide_password=False
    )


def plan_counts(engine: Engine) -> dict[str, tuple[int, int]]:
    """(generic, custom) executions of each statement kind prepared on the pool's connection.

    psycopg prepares a statement server-side from its 6th run on a connection; from
    then on PostgreSQL picks a generic or a custom plan per execution (plan_cache_mode).
    """
    counts: dict[str, tuple[int, int]] = {}
    with engine.begin() as conn:
        rows = conn.execute(
            text("SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements")
        )
        for statement, generic, custom in rows:
            name = StatementClock.category(statement)
            old = counts.get(name, (0, 0))
            counts[name] = (old[0] + int(generic), old[1] + int(custom))
    return counts


@dataclass
class CaseResult:
    """One backlog size under one plan_cache_mode: the timed passes and what they did."""

    queued: int
    mode: str
    projects: int
    done: int
    expected: int = 0
    fill_seconds: list[float] = field(default_factory=list)
    admitted: list[int] = field(default_factory=list)
    pass_ms: list[float] = field(default_factory=list)
    next_ms: list[float] = field(default_factory=list)
    next_admitted: list[int] = field(default_factory=list)
    statement_ms: dict[str, list[float]] = field(default_factory=dict)
    statement_calls: dict[str, int] = field(default_factory=dict)
    generic_plans: dict[str, int] = field(default_factory=dict)
    custom_plans: dict[str, int] = field(default_factory=dict)
    violations: int = 0
    table_bytes: dict[str, int] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.queued:,}" + ("" if self.mode == AUTO else " generic")

    @property
    def median_ms(self) -> float:
        return statistics.median(self.pass_ms)

    @property
    def admitted_per_pass(self) -> int:
        return int(statistics.median(self.admitted))

    @property
    def us_per_admitted(self) -> float:
        return self.median_ms * 1000 / max(1, self.admitted_per_pass)

    def split(self) -> dict[str, float]:
        """Median ms per statement kind, and the rest of the median pass."""
        split = {name: statistics.median(values) for name, values in self.statement_ms.items()}
        split["commit+python"] = max(0.0, self.median_ms - sum(split.values()))
        return split

    def generic_share(self, name: str) -> str:
        generic, custom = self.generic_plans.get(name, 0), self.custom_plans.get(name, 0)
        return f"{generic}/{generic + custom}" if generic + custom else "-"


def run_case(
    maintenance: Engine,
    url: str,
    config: Config,
    case: CaseResult,
    *,
    refill: bool,
    alert_every: int,
    passes: int,
    warmup: int,
    vacuum: bool,
) -> None:
    """One round of a case: (re)fill, then warm-up and timed passes on a fresh connection.

    A fresh engine per round makes the plan cache start from nothing, so the plans a
    case gets depend on its own backlog, not on the sizes measured before it.
    """
    if refill:
        case.fill_seconds.append(
            fill(maintenance, case.queued, case.projects, alert_every, case.done)
        )
    else:
        reset(maintenance, vacuum=True)
    if not case.expected:
        case.expected = expected_admissions(maintenance)
        case.table_bytes = table_sizes(maintenance)
    engine = make_engine(mode_url(url, case.mode), pool_size=1)
    clock = StatementClock(engine)
    sessions = make_sessionmaker(engine)
    try:
        for _ in range(warmup):
            reset(maintenance, vacuum)
            dispatch(sessions, config, clock=utcnow)
            case.violations += in_flight_violations(maintenance)
        for _ in range(passes):
            reset(maintenance, vacuum)
            before = plan_counts(engine)
            clock.clear()
            started = time.perf_counter()
            admitted = dispatch(sessions, config, clock=utcnow)
            elapsed = time.perf_counter() - started
            seconds, calls = dict(clock.seconds), dict(clock.calls)
            after = plan_counts(engine)
            case.violations += in_flight_violations(maintenance)
            case.pass_ms.append(elapsed * 1000)
            case.admitted.append(len(admitted))
            for name, value in seconds.items():
                case.statement_ms.setdefault(name, []).append(value * 1000)
            case.statement_calls = calls
            # The next pass right away: every pool is full (or nothing is left queued).
            started = time.perf_counter()
            case.next_admitted.append(len(dispatch(sessions, config, clock=utcnow)))
            case.next_ms.append((time.perf_counter() - started) * 1000)
            for name, (generic, custom) in after.items():
                old_generic, old_custom = before.get(name, (0, 0))
                case.generic_plans[name] = case.generic_plans.get(name, 0) + generic - old_generic
                case.custom_plans[name] = case.custom_plans.get(name, 0) + custom - old_custom
    finally:
        clock.close()
        engine.dispose()
    reset(maintenance, vacuum)


# ----------------------------------------------------------------------------- plans


def capture_plans(url: str, config: Config) -> list[Plan]:
    """Run one pass with statement capture, reset, then EXPLAIN what it ran.

    The plans are taken on the same backlog the pass saw (nothing admitted): the skip
    scan, the first project's in-flight count and its normal-lane admit UPDATE.
    """
    engine = make_engine(url, pool_size=1)
    clock = StatementClock(engine)
    try:
        reset(engine, vacuum=True)
        clock.clear()
        clock.capture = True
        dispatch(make_sessionmaker(engine), config, clock=utcnow)
        clock.capture = False
        reset(engine, vacuum=True)
    finally:
        clock.close()
        engine.dispose()
    chosen: dict[str, tuple[str, Any]] = {}
    for name in EXPLAINED:
        samples = clock.samples.get(name, [])
        if name == "admit":
            # The normal lane's UPDATE (LIMIT 10), not the alert lane's (LIMIT 1).
            samples = [s for s in samples if NORMAL_LANE in dict(s[1]).values()] or samples
        if samples:
            chosen[name] = samples[0]
    return [explain(url, name, sql, dict(params or {})) for name, (sql, params) in chosen.items()]


# ----------------------------------------------------------------------------- report

SPLIT_ORDER = ("skip-scan", "lock", "in-flight", "admit", "audit", "notify", "other")


def render(report: dict[str, Any], cases: list[CaseResult], plans: list[Plan]) -> None:
    print(
        f"wq admission pass, PostgreSQL {report['postgres']}, {report['cpus']} CPUs "
        f"(load {report['load_before']:.1f} before, {report['load_after']:.1f} after), "
        f"Python {report['python']}, {report['date']}"
    )
    print(
        f"pool N={CAPACITY} M={ALERT_CAPACITY}; {report['rounds']} rounds x "
        f"{report['passes']} timed pass(es) per case after {report['warmup']} warm-up, "
        f"cases interleaved, fresh connection per round; VACUUM between passes: "
        f"{report['vacuum']}"
    )
    print()
    header = (
        f"{'queued':>16} {'admitted':>8} {'median ms':>9} {'min':>7} {'max':>7} "
        f"{'us/item':>8} {'next ms':>7} {'generic admit':>13} {'generic count':>13}   "
        "split of the pass (median ms)"
    )
    print(header)
    print("-" * len(header))
    for case in cases:
        split = case.split()
        text_split = " ".join(
            f"{name}={split[name]:.1f}" for name in (*SPLIT_ORDER, "commit+python") if name in split
        )
        print(
            f"{case.label:>16} {case.admitted_per_pass:>8,} {case.median_ms:>9.1f} "
            f"{min(case.pass_ms):>7.1f} {max(case.pass_ms):>7.1f} "
            f"{case.us_per_admitted:>8.1f} {statistics.median(case.next_ms):>7.1f} "
            f"{case.generic_share('admit'):>13} "
            f"{case.generic_share('in-flight'):>13}   {text_split}"
        )
    print(
        "(next ms: the pass run right after the timed one, which admits nothing: every pool\n"
        " is full, or at 1k nothing is left queued. generic admit/count: executions of the\n"
        " admit UPDATE / in-flight count that ran a generic plan in the timed passes, out of\n"
        " those run as prepared statements)"
    )
    print()
    for case in cases:
        problems = []
        if any(count != case.expected for count in case.admitted):
            problems.append(f"admitted {case.admitted}, expected {case.expected} each pass")
        if any(case.next_admitted):
            problems.append(f"the next pass admitted {case.next_admitted}")
        if case.violations:
            problems.append(f"{case.violations} pool-bound violations")
        calls = ", ".join(f"{k}={v}" for k, v in sorted(case.statement_calls.items()))
        filled = (
            f"filled in {statistics.median(case.fill_seconds):.2f} s"
            if case.fill_seconds
            else "same backlog as above"
        )
        print(
            f"{case.label:>16}: +{case.done:,} done items; {filled}; "
            f"work_items {case.table_bytes.get('work_items', 0) / 2**20:.1f} MiB, "
            f"ix_work_items_queue {case.table_bytes.get('ix_work_items_queue', 0) / 2**20:.1f}"
            f" MiB; statements per pass: {calls}"
            + (f"; PROBLEM: {'; '.join(problems)}" if problems else "")
        )
    ratio = report.get("ratio")
    if ratio is not None:
        print()
        print(
            f"ratio {ratio['large']:,} / {ratio['small']:,} queued (auto plans): "
            f"{ratio['pass']:.2f}x per pass, {ratio['per_item']:.2f}x per admitted item "
            f"(goal < 2x): {'MET' if ratio['pass'] < 2 else 'MISSED'}"
        )
        if "generic_pass" in ratio:
            print(
                f"ratio {ratio['large']:,} generic plans / {ratio['small']:,} auto: "
                f"{ratio['generic_pass']:.2f}x per pass"
            )
    for plan in plans:
        print()
        print(f"=== {plan.name}: {' '.join(plan.sql.split())}")
        print("--- custom plan (parameters known)")
        print("\n".join(plan.custom))
        print("--- generic plan (plan_cache_mode=force_generic_plan, PREPARE/EXECUTE)")
        print("\n".join(plan.generic))
    if plans:
        print()
        print(f"plans at {report['plans_at']:,} queued:")
        for plan in plans:
            for kind, indexes, scans in (
                ("custom", plan.custom_indexes, plan.custom_seq_scans),
                ("generic", plan.generic_indexes, plan.generic_seq_scans),
            ):
                verdict = (
                    "SEQUENTIAL SCAN of work_items: " + "; ".join(scans)
                    if scans
                    else "no sequential scan of work_items"
                )
                print(
                    f"  {plan.name:>10} {kind:>7}: indexes {', '.join(indexes) or '-'}; {verdict}"
                )


# ----------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="time of one wq admission pass vs backlog size (a measurement, not a test)"
    )
    parser.add_argument(
        "--sizes",
        default="1000,10000,100000",
        help="queued items per case, comma-separated (default 1000,10000,100000)",
    )
    parser.add_argument("--projects", type=int, default=100, help="projects (default 100)")
    parser.add_argument(
        "--alert-every",
        type=int,
        default=20,
        help="one round of projects in N is alert (default 20: 5%% alert)",
    )
    parser.add_argument(
        "--done-items",
        type=int,
        default=0,
        help="also store this many finished (completed/done) items as history (default 0)",
    )
    parser.add_argument(
        "--rounds", type=int, default=5, help="rounds over all cases, interleaved (default 5)"
    )
    parser.add_argument("--passes", type=int, default=1, help="timed passes per round (1)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed passes per round (1)")
    parser.add_argument(
        "--no-generic",
        action="store_true",
        help="skip the extra case: the largest size with plan_cache_mode=force_generic_plan",
    )
    parser.add_argument(
        "--no-vacuum",
        action="store_true",
        help="do not VACUUM work_items between passes (dead index entries pile up)",
    )
    parser.add_argument("--no-plans", action="store_true", help="skip the EXPLAIN section")
    parser.add_argument(
        "--database-url",
        default=None,
        help="measure in this (PostgreSQL, migrated or empty) database; its work_items, "
        "audit_log and the tables referencing work_items are TRUNCATED. Default: a "
        "throwaway wq_bench_adm_<pid>",
    )
    add_admin_url(parser)
    parser.add_argument("--keep-database", action="store_true", help="do not drop it afterwards")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead")
    args = parser.parse_args(argv)
    try:
        args.size_list = [int(value) for value in args.sizes.split(",") if value.strip()]
    except ValueError:
        parser.error("--sizes takes comma-separated integers")
    if not args.size_list or min(args.size_list) <= 0:
        parser.error("--sizes must be positive")
    if min(args.projects, args.rounds, args.passes, args.alert_every) <= 0:
        parser.error("--projects, --rounds, --passes and --alert-every must be positive")
    if args.warmup < 0 or args.done_items < 0:
        parser.error("--warmup and --done-items must not be negative")
    if args.projects > 1000:
        parser.error("--projects is at most 1000 (3-digit project names)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    admission.ADMISSIONS_PER_PASS = args.projects * (CAPACITY + ALERT_CAPACITY)
    config = parse_config(
        {"pools": {"default": {"capacity": CAPACITY, "alert_capacity": ALERT_CAPACITY}}},
        "bench",
    )
    cases = [
        CaseResult(queued=size, mode=AUTO, projects=args.projects, done=args.done_items)
        for size in args.size_list
    ]
    if not args.no_generic:
        largest = max(args.size_list)
        cases.append(
            CaseResult(queued=largest, mode=GENERIC, projects=args.projects, done=args.done_items)
        )
    # Cases of one size run back to back, so a round fills each size once.
    order = sorted(cases, key=lambda case: (case.queued, case.mode != AUTO))
    plans: list[Plan] = []
    load_before = os.getloadavg()[0]
    with bench_database(
        args.database_url, args.admin_url, args.keep_database, "wq_bench_adm"
    ) as url:
        maintenance = make_engine(url, pool_size=1)
        try:
            schema.upgrade(maintenance)
            with maintenance.begin() as conn:
                postgres = conn.execute(text("SHOW server_version")).scalar_one()
            for number in range(args.rounds):
                previous = None
                for case in order:
                    if not args.json:
                        print(
                            f"... round {number + 1}/{args.rounds}: {case.label} queued",
                            file=sys.stderr,
                            flush=True,
                        )
                    run_case(
                        maintenance,
                        url,
                        config,
                        case,
                        refill=case.queued != previous,
                        alert_every=args.alert_every,
                        passes=args.passes,
                        warmup=args.warmup,
                        vacuum=not args.no_vacuum,
                    )
                    previous = case.queued
            if not args.no_plans:
                largest = max(args.size_list)
                if previous != largest:
                    fill(maintenance, largest, args.projects, args.alert_every, args.done_items)
                plans = capture_plans(url, config)
        finally:
            maintenance.dispose()
    report: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "postgres": postgres,
        "load_before": load_before,
        "load_after": os.getloadavg()[0],
        "rounds": args.rounds,
        "passes": args.passes,
        "warmup": args.warmup,
        "vacuum": not args.no_vacuum,
        "plans_at": max(args.size_list),
    }
    auto = [case for case in cases if case.mode == AUTO]
    small, large = auto[0], auto[-1]
    if len(auto) > 1:
        report["ratio"] = {
            "small": small.queued,
            "large": large.queued,
            "pass": large.median_ms / small.median_ms,
            "per_item": large.us_per_admitted / small.us_per_admitted,
        }
        generic = [case for case in cases if case.mode == GENERIC]
        if generic:
            report["ratio"]["generic_pass"] = generic[0].median_ms / small.median_ms
    if args.json:
        document = {
            **report,
            "cases": [
                {
                    **asdict(case),
                    "median_ms": case.median_ms,
                    "admitted_per_pass": case.admitted_per_pass,
                    "us_per_admitted": case.us_per_admitted,
                    "next_median_ms": statistics.median(case.next_ms),
                    "split_ms": case.split(),
                }
                for case in cases
            ],
            "plans": [asdict(plan) for plan in plans],
        }
        print(json.dumps(document, indent=2, default=str))
    else:
        render(report, cases, plans)
    bad = any(
        case.violations or any(case.next_admitted) or any(n != case.expected for n in case.admitted)
        for case in cases
    )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
