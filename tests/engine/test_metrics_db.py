"""Database gauges computed at scrape time: pools, queue age, items, pending events."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import Select, create_engine, func, select, text, update
from sqlalchemy.orm import Session, sessionmaker

from tests.conftest import Store, make_config
from tests.engine.helpers import submit
from tests.support.chain import Behaviour, chain_registry
from wq.engine import metrics_db
from wq.engine.admission import dispatch
from wq.engine.audit import AuditRecord, audit
from wq.engine.config import Config
from wq.engine.events import store_event
from wq.engine.metrics import Metrics
from wq.engine.metrics_db import (
    DatabaseCollector,
    Snapshot,
    admitted_query,
    audit_backlog_query,
    items_query,
    oldest_unarchived_query,
    queued_query,
)
from wq.engine.models import AuditEntry, WorkItem, utcnow

S = "hummingbird_workqueue_"
POOLS = {"default": {"capacity": 1, "alert_capacity": 1}, "infra": {"capacity": 2}}


def scrape(metrics: Metrics) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of a scrape, keyed by name and labels."""
    text = metrics.exposition().decode()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: dict[Any, float], name: str, **labels: str) -> float | None:
    return samples.get((S + name, frozenset(labels.items())))


def collecting(
    store: Store, config: Config, now: datetime | None = None
) -> tuple[Metrics, DatabaseCollector]:
    metrics = Metrics(process=False)
    clock = (lambda: now) if now is not None else utcnow
    collector = DatabaseCollector(
        store.sessions, config, lambda: ["chain"], prefix=metrics.service_prefix, clock=clock
    )
    metrics.registry.register(collector)
    return metrics, collector


def set_queued_at(store: Store, project: str, when: datetime) -> None:
    with store.sessions.begin() as session:
        session.execute(
            update(WorkItem)
            .where(WorkItem.project == project, WorkItem.admission == "queued")
            .values(queued_at=when)
        )


def test_pools_items_and_pending_events_come_from_the_database(store: Store) -> None:
    config = make_config(store.url, pools=POOLS, metrics={"cache_seconds": 0})
    registry = chain_registry(Behaviour())
    first = submit(store.sessions, registry, config, "team/app").item
    submit(store.sessions, registry, config, "team/app")
    submit(store.sessions, registry, config, "team/app", autonomous=True)
    submit(store.sessions, registry, config, "team/app", lane="alert")
    submit(store.sessions, registry, config, "infra/dns")
    failed = submit(store.sessions, registry, config, "other/x").item
    assert first is not None and failed is not None
    dispatch(store.sessions, config, clock=utcnow)
    with store.sessions.begin() as session:
        session.execute(
            update(WorkItem)
            .where(WorkItem.id == failed.id)
            .values(phase="failed", admission="done")
        )
        store_event(session, first.id, "redo", {})
    now = utcnow()
    set_queued_at(store, "team/app", now - timedelta(seconds=600))

    metrics, _ = collecting(store, config, now)
    samples = scrape(metrics)

    app, alert = {"project": "team/app", "lane": "normal"}, {"project": "team/app", "lane": "alert"}
    assert value(samples, "pool_capacity", **app) == 1
    assert value(samples, "pool_in_flight", **app) == 1
    assert value(samples, "pool_queued", **app) == 2
    assert value(samples, "pool_queued_autonomous", **app) == 1
    assert value(samples, "pool_oldest_queued_age_seconds", **app) == 600
    assert value(samples, "pool_in_flight", **alert) == 1
    assert value(samples, "pool_queued", **alert) == 0
    assert value(samples, "pool_oldest_queued_age_seconds", **alert) == 0
    dns = {"project": "infra/dns", "lane": "normal"}
    assert value(samples, "pool_capacity", **dns) == 2  # the group prefix's pool
    assert value(samples, "pool_in_flight", **dns) == 1
    # A project with nothing queued or admitted has no pool series.
    assert value(samples, "pool_capacity", project="other/x", lane="normal") is None
    assert value(samples, "items", type="chain", phase="active", admission="admitted") == 3
    assert value(samples, "items", type="chain", phase="active", admission="queued") == 2
    assert value(samples, "items", type="chain", phase="failed", admission="done") == 1
    assert value(samples, "pending_events") == 1
    assert value(samples, "db_metrics_errors_total") == 0


def test_a_pool_that_goes_idle_reads_zero_rather_than_vanishing(store: Store) -> None:
    config = make_config(store.url, pools=POOLS, metrics={"cache_seconds": 0})
    registry = chain_registry(Behaviour())
    item = submit(store.sessions, registry, config, "team/app").item
    assert item is not None
    dispatch(store.sessions, config, clock=utcnow)
    metrics, _ = collecting(store, config)
    app = {"project": "team/app", "lane": "normal"}
    assert value(scrape(metrics), "pool_in_flight", **app) == 1
    with store.sessions.begin() as session:
        session.execute(
            update(WorkItem).where(WorkItem.id == item.id).values(phase="done", admission="done")
        )
    samples = scrape(metrics)
    assert value(samples, "pool_in_flight", **app) == 0
    assert value(samples, "pool_queued", **app) == 0
    assert value(samples, "pool_capacity", **app) == 1


def test_the_audit_archive_backlog_and_its_age_while_archival_is_on(store: Store) -> None:
    now = utcnow()
    with store.sessions.begin() as session:
        audit(
            session,
            *(
                AuditRecord("auth_failed", "anonymous", trigger={"source": "api"}, at=at)
                for at in (now - timedelta(minutes=40), now - timedelta(minutes=5), now)
            ),
        )
    with store.sessions.begin() as session:  # the oldest one is archived already
        oldest = select(func.min(AuditEntry.id)).scalar_subquery()
        session.execute(update(AuditEntry).where(AuditEntry.id == oldest).values(archived_at=now))
    archiving = make_config(store.url, audit={"s3_bucket": "wq-audit"})
    samples = scrape(collecting(store, archiving, now)[0])
    assert value(samples, "audit_archive_backlog") == 2
    assert value(samples, "audit_archive_oldest_age_seconds") == pytest.approx(300, abs=1)
    # Archival off: no backlog to speak of, the series are left empty.
    samples = scrape(collecting(store, make_config(store.url), now)[0])
    assert value(samples, "audit_archive_backlog") is None
    with store.sessions.begin() as session:
        session.execute(update(AuditEntry).values(archived_at=now))
    samples = scrape(collecting(store, archiving, now)[0])
    assert value(samples, "audit_archive_backlog") == 0
    assert value(samples, "audit_archive_oldest_age_seconds") == 0


def test_the_age_keeps_growing_between_readings(store: Store) -> None:
    config = make_config(store.url, metrics={"cache_seconds": 3600})
    registry = chain_registry(Behaviour())
    submit(store.sessions, registry, config, "team/app", lane="alert")
    submit(store.sessions, registry, config, "team/app", lane="alert")  # waits: 1 alert slot
    dispatch(store.sessions, config, clock=utcnow)
    start = utcnow()
    set_queued_at(store, "team/app", start)
    clock = {"now": start + timedelta(seconds=10)}
    metrics = Metrics(process=False)
    collector = DatabaseCollector(
        store.sessions, config, lambda: ["chain"], prefix=S, clock=lambda: clock["now"]
    )
    metrics.registry.register(collector)
    lane = {"project": "team/app", "lane": "alert"}
    assert value(scrape(metrics), "pool_oldest_queued_age_seconds", **lane) == 10
    clock["now"] += timedelta(seconds=50)  # the cached reading is reused, the age is not
    assert value(scrape(metrics), "pool_oldest_queued_age_seconds", **lane) == 60


def test_readings_are_cached_and_a_failed_reading_serves_the_last_one(store: Store) -> None:
    config = make_config(store.url, metrics={"cache_seconds": 3600})
    registry = chain_registry(Behaviour())
    submit(store.sessions, registry, config, "team/app")
    metrics, collector = collecting(store, config)
    items = {"type": "chain", "phase": "active", "admission": "queued"}
    assert value(scrape(metrics), "items", **items) == 1

    submit(store.sessions, registry, config, "team/app")
    # Within cache_seconds the database is not asked again: several replicas scraped
    # often cost one reading each per period.
    assert value(scrape(metrics), "items", **items) == 1

    collector.cache_seconds = 0
    nowhere = create_engine("postgresql+psycopg://wq@127.0.0.1:1/none")
    collector.sessions = sessionmaker(bind=nowhere)
    try:
        samples = scrape(metrics)  # the scrape still answers, with the last reading
    finally:
        nowhere.dispose()
    assert value(samples, "items", **items) == 1
    assert value(samples, "db_metrics_errors_total") == 1

    collector.sessions = store.sessions
    samples = scrape(metrics)
    assert value(samples, "items", **items) == 2
    assert value(samples, "db_metrics_errors_total") == 1


def test_an_outage_is_one_warning_and_a_bug_keeps_its_traceback(
    store: Store, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    metrics, collector = collecting(store, make_config(store.url, metrics={"cache_seconds": 0}))
    caplog.set_level(logging.INFO, logger="wq.engine.metrics_db")
    nowhere = create_engine("postgresql+psycopg://wq@127.0.0.1:1/none")
    collector.sessions = sessionmaker(bind=nowhere)
    try:
        for _ in range(4):  # Prometheus scrapes every few seconds
            scrape(metrics)
    finally:
        nowhere.dispose()
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "database unavailable" in warnings[0].getMessage()

    collector.sessions = store.sessions
    scrape(metrics)
    assert "database answering again" in caplog.records[-1].getMessage()

    def broken(*args: Any, **kwargs: Any) -> Snapshot:
        raise RuntimeError("a bug in a gauge query")

    monkeypatch.setattr(metrics_db, "read_snapshot", broken)
    scrape(metrics)
    assert caplog.records[-1].levelno == logging.ERROR and caplog.records[-1].exc_info
    assert value(scrape(metrics), "db_metrics_errors_total") == 6


def test_an_unreachable_database_is_asked_once_per_cache_period(store: Store) -> None:
    # /metrics needs no credentials: scraping it faster must not reach the database more.
    metrics, collector = collecting(store, make_config(store.url, metrics={"cache_seconds": 3600}))
    nowhere = create_engine("postgresql+psycopg://wq@127.0.0.1:1/none")
    collector.sessions = sessionmaker(bind=nowhere)
    try:
        samples = [scrape(metrics) for _ in range(3)]
    finally:
        nowhere.dispose()
    assert value(samples[-1], "db_metrics_errors_total") == 1


def test_a_scrape_during_a_hung_reading_serves_the_last_one_at_once(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    metrics, _ = collecting(store, make_config(store.url, metrics={"cache_seconds": 0}))
    scrape(metrics)  # a first reading
    entered, release = threading.Event(), threading.Event()
    read = metrics_db.read_snapshot

    def hung(*args: Any, **kwargs: Any) -> Snapshot:
        entered.set()
        release.wait(30)
        return read(*args, **kwargs)

    monkeypatch.setattr(metrics_db, "read_snapshot", hung)
    first = threading.Thread(target=scrape, args=(metrics,))
    first.start()
    try:
        assert entered.wait(10)
        # Scrapes behind it used to wait for the lock, each holding an API thread.
        later: list[dict[Any, float]] = []
        second = threading.Thread(target=lambda: later.append(scrape(metrics)))
        second.start()
        second.join(10)
        assert not second.is_alive(), "the second scrape waited for the hung reading"
        assert value(later[0], "pending_events") == 0  # the last reading, served
    finally:
        release.set()
        first.join(10)


def test_without_any_reading_the_gauges_are_empty_not_zero(store: Store) -> None:
    metrics = Metrics(process=False)
    nowhere = create_engine("postgresql+psycopg://wq@127.0.0.1:1/none")
    try:
        metrics.registry.register(
            DatabaseCollector(sessionmaker(bind=nowhere), store.config, lambda: ["chain"], prefix=S)
        )
        samples = scrape(metrics)
    finally:
        nowhere.dispose()
    assert value(samples, "pending_events") is None  # unknown, not "nothing pending"
    assert value(samples, "db_metrics_errors_total") == 1


@pytest.mark.postgres
def test_the_budget_bounds_the_queries_on_postgresql(
    postgres_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    finished: list[bool] = []

    def slow(session: Session, types: Any) -> Snapshot:
        session.execute(text("SELECT pg_sleep(5)"))
        finished.append(True)  # the statement timeout did not cancel the query
        return Snapshot(taken_at=0.0)

    monkeypatch.setattr(metrics_db, "read_snapshot", slow)
    config = make_config(postgres_store.url, metrics={"cache_seconds": 0, "budget_seconds": 0.1})
    metrics, _ = collecting(postgres_store, config)
    samples = scrape(metrics)
    assert finished == []
    assert value(samples, "db_metrics_errors_total") == 1
    # The session's own statement timeout is untouched afterwards (SET LOCAL).
    with postgres_store.sessions() as session:
        timeout = session.execute(text("SHOW statement_timeout")).scalar_one()
    assert timeout != "100ms"


@pytest.mark.postgres
def test_the_gauges_are_read_without_parallel_workers(
    postgres_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # On a long history the planner gave the failed items' count two workers, whose
    # start cost more than the scan (benchmarks/scale.py): the reading runs without.
    seen: list[str] = []
    real = metrics_db.read_snapshot

    def reading(session: Session, types: Any, **kwargs: Any) -> Snapshot:
        seen.append(session.execute(text("SHOW max_parallel_workers_per_gather")).scalar_one())
        return real(session, types, **kwargs)

    monkeypatch.setattr(metrics_db, "read_snapshot", reading)
    config = make_config(postgres_store.url, metrics={"cache_seconds": 0})
    metrics, _ = collecting(postgres_store, config)
    scrape(metrics)
    assert seen == ["0"]
    # Only for the reading (SET LOCAL): other sessions plan as configured.
    with postgres_store.sessions() as session:
        assert session.execute(text("SHOW max_parallel_workers_per_gather")).scalar_one() != "0"


# Indexes that restrict a query to the live working set: partial indexes over queued,
# admitted, unfinished or unarchived rows, or a `(type, phase, admission)` range (an Index
# Cond, not a Filter).
RESTRICTING = {
    "items": ("ix_work_items_idempotency_key", "ix_work_items_dedup_scope"),
    "queued": ("ix_work_items_queue",),
    "admitted": ("ix_work_items_in_flight", "ix_work_items_claimable"),
    "audit": ("ix_audit_log_unarchived",),
}


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
@pytest.mark.parametrize(
    ("name", "query"),
    [
        ("items", lambda: items_query(["chain", "mr"])),
        ("queued", queued_query),
        ("admitted", admitted_query),
        ("audit", audit_backlog_query),
        ("audit", oldest_unarchived_query),
    ],
)
def test_the_gauge_queries_are_served_by_indexes(
    store: Store, name: str, query: Callable[[], Select[Any]]
) -> None:
    """Cost follows the live working set, not the table.

    The planner may pick any index whose predicate fits (it prefers the partial ones
    over live items on a small table). PostgreSQL only: EXPLAIN's plan is PostgreSQL's.
    """
    with store.sessions() as session:
        session.execute(text("SET LOCAL enable_seqscan = off"))
        compiled = query().compile(store.engine, compile_kwargs={"literal_binds": True})
        plan = "\n".join(row[0] for row in session.execute(text(f"EXPLAIN {compiled}")))
    ranged = "ix_work_items_type_phase" in plan and "Index Cond" in plan
    assert ranged or any(index in plan for index in RESTRICTING[name]), plan


def test_wqs_postgresql_sessions_run_without_jit(postgres_store: Store) -> None:
    # JIT compiles statements the planner thinks costly, as the gauges' are on a long
    # history: tens of milliseconds for queries that take a few (benchmarks/scale.py).
    with postgres_store.sessions() as session:
        assert session.execute(text("SHOW jit")).scalar_one() == "off"
        assert session.execute(text("SHOW statement_timeout")).scalar_one() == "10s"
