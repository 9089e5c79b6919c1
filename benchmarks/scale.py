"""Cost against history: the same working set measured with and without a big history.

Two PostgreSQL databases get the same working set: `--active` active `mr` items over
`--projects` projects (four in five queued, the rest idle) and a twentieth as many
failed ones from the last day, the last day of audit rows (unarchived, as archival
keeps up; a fifth are phase changes, the failed items' the day's ends) and one day of
rows just past `audit.retention_days` (what the next prune deletes). The big one also
gets the history a deployment keeps: `--items` terminal `mr` items over 30 days (90 %
completed, 7 % failed, 3 % cancelled; no `admitted_at`, so that the planner's
statistics say few items were ever admitted) with their details and three dimension
rows each, and `--audit` archived audit rows
over those days. Seeding is set-based SQL, one day at a time.

Then, in each of `--rounds` rounds, each figure on one database right after the other
(the order swapped every round), with a real `wq daemon` on each (INFO logging on,
pools that admit nothing, so nothing runs behind the measurements): the median latency
of GET item, the list (first page; `phase=active`; one project; `phase=failed`), an
item's history, `/api/pools`, `/api/stats` for 24 h and a `/metrics` scrape (its
database gauges read at every scrape); and in this process: an admission pass, a sweep
pass, the prune of the expired day and an archiver claim (both rolled back, so that
every round does the same work). Last, the drain of `--drain` new no-op items
(`throughput.py`'s engine run), twice on each database: baseline, big, big, baseline.

Each figure is printed with its ratio big/baseline, the median of the rounds' ratios;
the goal is <= 1.25x for each.
`--json` prints the report as JSON; `--explain` prints EXPLAIN (ANALYZE, BUFFERS) of
every statement behind each figure on the big database (`scale_explain.py`).

    python benchmarks/scale.py                       # 1M items, 10M audit rows (~10 min)
    python benchmarks/scale.py --items 100000 --audit 1000000   # a quick look
    python benchmarks/scale.py --big-url postgresql+psycopg://postgres@127.0.0.1/kept \\
        --base-url postgresql+psycopg://postgres@127.0.0.1/kept_base   # seeded before
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
from api import Daemon
from databases import add_admin_url, bench_database
from scale_explain import explain
from sqlalchemy import Engine, text
from throughput import run_wq

from wq.engine import schema
from wq.engine.admission import dispatch
from wq.engine.archive import claim
from wq.engine.audit import prune
from wq.engine.config import parse_config
from wq.engine.db import MIGRATION_TIMEOUTS, make_engine, make_sessionmaker
from wq.engine.models import utcnow
from wq.engine.registry import TypeRegistry
from wq.engine.sweep import sweep_once

DAY = 86400
GOAL = 1.25
RETENTION_DAYS = 30
DIMENSIONS = ("mr_open", "ci_green", "approved")

NEW_ITEMS = """
WITH new AS (
    INSERT INTO work_items (id, type, project, phase, attempts, error, admission, seq, lane,
                            autonomous, queued_at, admitted_at, created_at, updated_at, stamp)
    SELECT gen_random_uuid(), 'mr', :prefix || lpad((g % :projects)::text, 3, '0'),
           {phase}, 0, {error}, {admission}, {seq}, 'normal', false, {queued_at},
           {admitted_at}, {created_at}, {created_at}, 0
      FROM generate_series(CAST(:first AS integer), CAST(:last AS integer)) AS g
    RETURNING id, created_at
), details AS (
    INSERT INTO mr_details (id, source_branch, target_branch, title, description, labels,
                            commit_message, file_actions, content_hash, generation, draft,
                            auto_merge, applied_labels)
    SELECT id, 'wq/seed-' || id, 'main', 'seeded', '', '[]', 'seeded',
           '[{{"action": "update", "file_path": "f.txt", "content": "x"}}]',
           md5(id::text), 1, false, false, '[]'
      FROM new
    RETURNING id
)
INSERT INTO work_item_statuses (work_item_id, dimension, variant, status, updated_at)
SELECT new.id, d.name, '', 'true', new.created_at
  FROM new CROSS JOIN (VALUES {dimensions}) AS d(name)
"""

ACTIVE = NEW_ITEMS.format(
    phase="'active'",
    error="NULL",
    admission="CASE WHEN g % 5 = 0 THEN 'idle' ELSE 'queued' END",
    seq="CASE WHEN g % 5 = 0 THEN NULL ELSE nextval('wq_admission_seq') END",
    queued_at="CASE WHEN g % 5 = 0 THEN NULL ELSE now() - make_interval(secs => g) END",
    admitted_at="NULL",
    created_at="now() - make_interval(secs => g)",
    dimensions=", ".join(f"('{name}')" for name in DIMENSIONS),
)
HISTORY = NEW_ITEMS.format(
    phase="CASE WHEN g % 100 < 90 THEN 'completed' WHEN g % 100 < 97 THEN 'failed'"
    " ELSE 'cancelled' END",
    error="CASE WHEN g % 100 BETWEEN 90 AND 96 THEN 'seeded failure' END",
    admission="'done'",
    seq="NULL",
    queued_at="NULL",
    admitted_at="NULL",
    created_at="now() - make_interval(secs => :newest + (CAST(:day AS integer) - 1) * :slice"
    " + g % :slice)",
    dimensions=", ".join(f"('{name}')" for name in DIMENSIONS),
)
# Failed items of the last day, waiting for an operator (`phase=failed` lists them).
RECENT_FAILED = NEW_ITEMS.format(
    phase="'failed'",
    error="'seeded failure'",
    admission="'done'",
    seq="NULL",
    queued_at="NULL",
    admitted_at="now() - make_interval(secs => g * 17 - 5)",
    created_at="now() - make_interval(secs => g * 17)",
    dimensions=", ".join(f"('{name}')" for name in DIMENSIONS),
)
# The working set's items a drain admitted, queued again (`drained`).
REQUEUE_WORKING_SET = """
UPDATE work_items SET admission = 'queued', admitted_at = NULL
 WHERE project LIKE 'seed/%' AND admission = 'admitted'
"""
# An item's audit trail: ten rows a few seconds apart; the ninth ends its phase.
EVENTS = [
    "created",
    "queued",
    "admitted",
    "action_completed",
    "released",
    "admitted",
    "action_completed",
    "released",
    "phase_changed",
    "released",
]
AUDIT = f"""
INSERT INTO audit_log (at, event_type, work_item_id, actor, new_state, trigger, metadata,
                       archived_at)
SELECT w.created_at + make_interval(secs => k * 3),
       (ARRAY{EVENTS!r})[k],
       w.id, 'seed',
       jsonb_build_object('phase', CASE WHEN k = 9 THEN w.phase ELSE 'active' END,
                          'admission', w.admission, 'project', w.project),
       '{{"source": "seed"}}',
       CASE WHEN k IN (3, 6) THEN jsonb_build_object('queued_seconds', k * 1.5) END,
       CASE WHEN :archived THEN now() END
  FROM work_items w CROSS JOIN generate_series(1, CAST(:per_item AS integer)) AS k
 WHERE w.project LIKE 'hist/%'
   AND w.created_at > now() - make_interval(secs => :newest + CAST(:day AS integer) * :slice)
   AND w.created_at <= now() - make_interval(secs => :newest + (CAST(:day AS integer) - 1) * :slice)
"""
# Rows of the working set's items at a given age: the last day, or the day to prune.
# A fifth are phase changes, to the item's phase: the failed items' are the day's ends.
WORKING_AUDIT = """
WITH active AS (
    SELECT array_agg(id ORDER BY id) AS ids, array_agg(project ORDER BY id) AS projects,
           array_agg(phase ORDER BY id) AS phases
      FROM work_items WHERE project LIKE 'seed/%'
)
INSERT INTO audit_log (at, event_type, work_item_id, actor, new_state, trigger, metadata,
                       archived_at)
SELECT now() - make_interval(secs => :from_seconds + (g * 86399.0 / :rows)),
       (ARRAY['created', 'admitted', 'released', 'action_completed', 'phase_changed'])[1 + g % 5],
       active.ids[1 + g % :active], 'seed',
       jsonb_build_object('phase', CASE WHEN g % 5 = 4 THEN active.phases[1 + g % :active]
                                        ELSE 'active' END,
                          'project', active.projects[1 + g % :active]),
       '{"source": "seed"}',
       CASE WHEN g % 5 = 1 THEN jsonb_build_object('queued_seconds', g % 600) END,
       CASE WHEN :archived THEN now() END
  FROM generate_series(1, CAST(:rows AS integer)) AS g CROSS JOIN active
"""


def log(message: str) -> None:
    print(f"... {message}", file=sys.stderr, flush=True)


def seed_working_set(engine: Engine, active: int, projects: int) -> None:
    """The active and the recently failed items both databases hold."""
    with engine.begin() as conn:
        conn.execute(text("SET LOCAL synchronous_commit = off"))
        conn.execute(
            text(ACTIVE),
            {"prefix": "seed/p", "projects": projects, "first": 1, "last": active},
        )
        conn.execute(
            text(RECENT_FAILED),
            {"prefix": "seed/p", "projects": projects, "first": 1, "last": max(1, active // 20)},
        )


# The working set's two days of audit rows: (what, seconds before now, archived).
PAST_RETENTION = ("the day past retention", RETENTION_DAYS * DAY + 60, True)
LAST_DAY = ("the last day", 0, False)


def seed_working_audit(engine: Engine, active: int, rows: int, day: tuple[str, int, bool]) -> None:
    """One day of the working set's audit rows (`PAST_RETENTION` or `LAST_DAY`)."""
    label, start, archived = day
    with engine.begin() as conn:
        conn.execute(text("SET LOCAL synchronous_commit = off"))
        conn.execute(
            text(WORKING_AUDIT),
            {"from_seconds": start, "rows": rows, "archived": archived, "active": active},
        )
    log(f"working set: {rows:,} audit rows for {label}")


def seed_history(engine: Engine, items: int, audit: int, projects: int) -> None:
    """`items` terminal items and `audit` archived rows for them, all inside retention.

    They are between one and 29 days old, in 30 slices: older than the stats' window
    (the last day is the working set's), younger than what the prune deletes, with a
    day's margin for the run's own time (rows past retention would be deleted too).
    """
    per_day = max(1, items // RETENTION_DAYS)
    ages = {"newest": DAY + 60, "slice": (RETENTION_DAYS - 2) * DAY // RETENTION_DAYS}
    per_item = max(1, min(len(EVENTS), round(audit / max(1, items))))
    started = time.monotonic()
    # Oldest first: audit rows lie on disk in the order they were written, as a
    # deployment's do (the planner reads that order off `at` to cost its index).
    for done, day in enumerate(range(RETENTION_DAYS, 0, -1), start=1):
        first = (day - 1) * per_day + 1
        with engine.begin() as conn:
            conn.execute(text("SET LOCAL synchronous_commit = off"))
            conn.execute(
                text(HISTORY),
                {
                    "prefix": "hist/p",
                    "projects": projects,
                    "first": first,
                    "last": first + per_day - 1,
                    "day": day,
                }
                | ages,
            )
            conn.execute(text(AUDIT), {"day": day, "per_item": per_item, "archived": True} | ages)
        if done % 5 == 0:
            log(f"history: day {done} of {RETENTION_DAYS} ({time.monotonic() - started:.0f} s)")


def analyze(engine: Engine) -> dict[str, int]:
    """VACUUM ANALYZE (the state a settled database is in), a CHECKPOINT (the seed's
    gigabytes written out now, not by the checkpointer during the measurements) and
    the row counts."""
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM ANALYZE"))
        conn.execute(text("CHECKPOINT"))
        return {
            table: int(conn.execute(text(f"SELECT count(*) FROM {table}")).scalar_one())
            for table in ("work_items", "work_item_statuses", "audit_log")
        }


def daemon_document(url: str) -> dict[str, Any]:
    """A daemon handling `mr`, whose pools admit nothing: nothing runs while it is measured.

    Its own audit prune keeps everything: the seeded day past retention is what this
    process's prune measures (rolled back), and a daemon deleting it in the background
    would slow the figures of the database it serves and empty the measure.
    """
    return {
        "database_url": url,
        "processing": {"poll_interval_seconds": 5, "sweep_interval_seconds": 3600},
        "audit": {"retention_days": 36500},
        "pools": {"default": {"capacity": 0, "alert_capacity": 0}},
        "metrics": {"cache_seconds": 0},
        "handled_types": {
            "mr": {
                "gitlab_url": "http://127.0.0.1:9",  # never called: nothing is admitted
                "projects": {"seed": {"token_env": "WQ_BENCH_GITLAB_TOKEN"}},
            }
        },
    }


def median_ms(call: Callable[[], object], requests: int) -> float:
    """The median of `requests` calls after three to warm up, in milliseconds."""
    for _ in range(3):
        call()
    times = []
    for _ in range(requests):
        started = time.perf_counter()
        call()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def http_measures(base: str, token: str, sample: dict[str, str]) -> dict[str, Callable[[], object]]:
    """The HTTP reads, each a call that fails loudly on a non-200."""
    client = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=60)

    def get(path: str, **params: Any) -> Callable[[], object]:
        def call() -> object:
            answer = client.get(path, params=params)
            if answer.status_code != 200:
                raise SystemExit(f"GET {path} {params}: {answer.status_code} {answer.text}")
            return answer

        return call

    return {
        "GET item": get(f"/api/work-items/{sample['item']}"),
        "list, first page": get("/api/work-items", limit=50),
        "list, phase=active": get("/api/work-items", limit=50, phase="active"),
        "list, one project": get("/api/work-items", limit=50, project=sample["project"]),
        "list, phase=failed": get("/api/work-items", limit=50, phase="failed"),
        "item history": get(f"/api/work-items/{sample['item']}/history"),
        "/api/pools": get("/api/pools"),
        "/api/stats 24h": get("/api/stats", window="24h", step="15m"),
        "/metrics scrape": get("/metrics"),
    }


@contextlib.contextmanager
def rolled_back(engine: Engine) -> Iterator[Any]:
    """A session whose work is undone: every round deletes and claims the same rows."""
    session = make_sessionmaker(engine)()
    try:
        yield session
    finally:
        session.rollback()
        session.close()


def engine_measures(engine: Engine, url: str) -> dict[str, Callable[[], object]]:
    """The engine's own passes on this database, as a daemon runs them."""
    # The sweep's own prune finds nothing: the expired day is `prune one day`'s to delete.
    document = daemon_document(url) | {"handled_types": {}, "audit": {"retention_days": 3650}}
    config = parse_config(document, "scale")
    sessions = make_sessionmaker(engine)
    registry = TypeRegistry()

    def prune_day() -> object:
        with rolled_back(engine) as session:
            return prune(session, retention_days=RETENTION_DAYS, now=utcnow())

    def archiver_claim() -> object:
        with rolled_back(engine) as session:
            return claim(session, limit=100, now=utcnow())

    return {
        "admission pass": lambda: dispatch(sessions, config, clock=utcnow),
        "sweep pass": lambda: sweep_once(sessions, registry, config),
        "prune one day": prune_day,
        "archiver claim": archiver_claim,
    }


def sample_of(engine: Engine) -> dict[str, str]:
    """An active item and its project, to read."""
    with engine.connect() as conn:
        row = conn.execute(
            text(
                "SELECT id, project FROM work_items WHERE project LIKE 'seed/%' ORDER BY id LIMIT 1"
            )
        ).one()
    return {"item": str(row.id), "project": row.project}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=1_000_000, help="terminal items of history")
    parser.add_argument("--audit", type=int, default=10_000_000, help="audit rows of history")
    parser.add_argument("--active", type=int, default=10_000, help="active items (both)")
    parser.add_argument("--projects", type=int, default=100, help="projects of the active items")
    parser.add_argument("--drain", type=int, default=10_000, help="new items drained at the end")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds (5)")
    parser.add_argument("--requests", type=int, default=30, help="timed calls per figure (30)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--explain", action="store_true", help="EXPLAIN on the big database")
    parser.add_argument("--base-url", help="a baseline database seeded before (kept)")
    parser.add_argument("--big-url", help="a big database seeded before (kept)")
    parser.add_argument("--keep-databases", action="store_true", help="do not drop them")
    add_admin_url(parser)
    return parser.parse_args(argv)


def prepared(url: str, args: argparse.Namespace, *, big: bool, seeded: bool) -> dict[str, int]:
    """Migrate and seed a database (unless it was seeded before); its row counts and
    the rows the measured prune deletes (the same on both, or the figure compares
    different work). Seeding runs without the daemon's statement timeout: a day of
    audit rows is one statement, longer than that on a slow machine."""
    engine = make_engine(url, pool_size=2, timeouts=MIGRATION_TIMEOUTS)
    try:
        if not seeded:
            schema.upgrade(engine)
            per_day = args.audit // RETENTION_DAYS
            seed_working_set(engine, args.active, args.projects)
            seed_working_audit(engine, args.active, per_day, PAST_RETENTION)
            if big:
                seed_history(engine, args.items, args.audit, args.projects)
            seed_working_audit(engine, args.active, per_day, LAST_DAY)
        counts = analyze(engine)
        with rolled_back(engine) as session:
            counts["pruned"] = prune(session, retention_days=RETENTION_DAYS, now=utcnow())
        return counts
    finally:
        engine.dispose()


def measure(args: argparse.Namespace, urls: dict[str, str], root: Path) -> dict[str, Any]:
    """Every figure of both databases: each figure on one right after the other, the
    order of the two swapped every round, so that a machine whose speed drifts within
    minutes weighs on both alike."""
    for name in urls:
        (root / name).mkdir()
    daemons = {
        name: Daemon(url, root / name, {}, daemon_document(url)) for name, url in urls.items()
    }
    figures: dict[str, dict[str, list[float]]] = {name: {} for name in urls}
    try:
        tokens = {name: daemon.wait_ready() for name, daemon in daemons.items()}
        engines = {name: make_engine(url, pool_size=4) for name, url in urls.items()}
        samples = {name: sample_of(engine) for name, engine in engines.items()}
        calls = {
            name: http_measures(daemons[name].base, tokens[name], samples[name])
            | engine_measures(engines[name], url)
            for name, url in urls.items()
        }
        for round_number in range(1, args.rounds + 1):
            order = list(urls) if round_number % 2 else list(reversed(urls))
            for what in calls[order[0]]:
                for name in order:
                    figures[name].setdefault(what, []).append(
                        median_ms(calls[name][what], args.requests)
                    )
            log(f"round {round_number} of {args.rounds} measured")
        if args.explain:
            big = urls["big"]
            config = parse_config(daemon_document(big), "scale")
            explain(engines["big"], config, samples["big"], engine_measures(engines["big"], big))
        for engine in engines.values():
            engine.dispose()
    finally:
        for daemon in daemons.values():
            daemon.stop()
    return figures


def drained(url: str, items: int) -> float:
    """Items per second draining `items` new no-op items through the engine.

    The no-op items of an earlier drain are removed first. The drain's admission
    passes admit some of the working set's queued items too (its pools are large, and
    nothing here runs an `mr` action): they go back to the queue afterwards, so that a
    kept database is measured again as it was seeded.
    """
    engine = make_engine(url, pool_size=1)
    try:
        with engine.begin() as conn:
            for table in ("audit_log", "work_item_statuses"):
                conn.execute(
                    text(
                        f"DELETE FROM {table} WHERE work_item_id IN "
                        "(SELECT id FROM work_items WHERE type = 'bench_noop')"
                    )
                )
            conn.execute(text("DELETE FROM work_items WHERE type = 'bench_noop'"))
        # What the deletes left behind is vacuumed, as autovacuum would have by the next
        # drain (a server may run without it): every drain starts from the same tables.
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text("VACUUM ANALYZE work_items, work_item_statuses, audit_log"))
    finally:
        engine.dispose()
    result = run_wq(
        url,
        items=items,
        projects=100,
        workers=10,
        batch=500,
        phase="submit-first",
        rate=None,
        poll=0.5,
        listen=True,
        timeout=600,
        on_phase=log,
    )
    engine = make_engine(url, pool_size=1)
    try:
        with engine.begin() as conn:
            conn.execute(text(REQUEUE_WORKING_SET))
    finally:
        engine.dispose()
    return float(result.items_per_second)


def paired_ratio(base: list[float], big: list[float]) -> float | None:
    """The median of the rounds' big/base ratios: each round measured the two one right
    after the other, so a ratio compares them at the machine's speed of that moment."""
    ratios = [b / a for a, b in zip(base, big, strict=True) if a]
    return round(statistics.median(ratios), 2) if ratios else None


def report(
    figures: dict[str, Any], drains: dict[str, list[float]], counts: dict[str, Any]
) -> dict[str, Any]:
    rows = {}
    for what in figures["base"]:
        rows[what] = {
            "base_ms": round(statistics.median(figures["base"][what]), 3),
            "big_ms": round(statistics.median(figures["big"][what]), 3),
            "ratio": paired_ratio(figures["base"][what], figures["big"][what]),
            "spread_big_ms": [
                round(min(figures["big"][what]), 3),
                round(max(figures["big"][what]), 3),
            ],
        }
    rows["drain (items/s)"] = {
        "base_per_second": round(statistics.median(drains["base"])),
        "big_per_second": round(statistics.median(drains["big"])),
        # A throughput: the ratio is baseline over big, so that above 1 is slower too.
        "ratio": paired_ratio(drains["big"], drains["base"]),
    }
    return {"rows": counts, "figures": rows, "goal": GOAL}


def render(result: dict[str, Any]) -> None:
    print(f"rows: {json.dumps(result['rows'])}")
    print(f"{'what':<22} {'baseline':>12} {'big':>12} {'big/base':>9}  goal <= {GOAL}x")
    for what, row in result["figures"].items():
        if "base_ms" in row:
            base, big = f"{row['base_ms']:.2f} ms", f"{row['big_ms']:.2f} ms"
        else:
            base, big = f"{row['base_per_second']}/s", f"{row['big_per_second']}/s"
        ratio = row["ratio"]
        mark = "" if ratio is not None and ratio <= GOAL else "  NOT MET"
        print(f"{what:<22} {base:>12} {big:>12} {ratio:>8}x{mark}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # The daemons log at INFO as deployed; this process too (throughput's drain).
    logging.basicConfig(level=logging.INFO, stream=open(os.devnull, "w"))  # noqa: SIM115
    load_before = os.getloadavg()[0]
    with contextlib.ExitStack() as stack:
        urls = {
            "base": args.base_url
            or stack.enter_context(
                bench_database(None, args.admin_url, args.keep_databases, "wq_scale_base")
            ),
            "big": args.big_url
            or stack.enter_context(
                bench_database(None, args.admin_url, args.keep_databases, "wq_scale_big")
            ),
        }
        counts = {}
        for name, url in urls.items():
            seeded = bool(args.base_url if name == "base" else args.big_url)
            log(f"{name}: {'analyzing' if seeded else 'seeding'}")
            counts[name] = prepared(url, args, big=name == "big", seeded=seeded)
        root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="wq-scale-")))
        figures = measure(args, urls, root)
        drains: dict[str, list[float]] = {name: [] for name in urls}
        for order in (list(urls), list(reversed(urls))):
            for name in order:
                drains[name].append(drained(urls[name], args.drain))
    result = report(figures, drains, counts)
    result["load_average"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        render(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
