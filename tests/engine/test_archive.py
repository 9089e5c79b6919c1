"""Audit archival to S3 against a moto server over HTTP, on both databases.

Outages go through a TCP relay in front of moto that can be taken down, so the
archiver's boto3 client meets real connection failures.
"""

from __future__ import annotations

import gzip
import json
import logging
import re
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

import boto3
import pytest
from sqlalchemy import func, select, update

from tests.conftest import Store, make_config
from tests.engine.helpers import submit, wait_idle
from tests.fakes.relay import Relay
from tests.support.chain import STEPS, Behaviour, chain_registry
from tests.support.waiting import wait_for
from wq.engine import metrics
from wq.engine.archive import AuditArchiver, S3Archive, rearchive
from wq.engine.audit import AuditRecord, audit, prune
from wq.engine.models import AuditEntry, utcnow
from wq.engine.processing import ProcessingManager
from wq.engine.sweep import sweep_once

KEY = re.compile(
    r"^(?P<prefix>wq/audit)/(?P<path>\d{4}/\d{2}/\d{2}/\d{2}/\d{2})/"
    r"(?P<timestamp>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z)-(?P<id>\d+)"
    r"#(?P<item>[0-9a-f-]{36}|none)::(?P<event>[a-z_]+)\.json\.gz$"
)
PREFIX = "wq/audit"


def s3_client(url: str) -> Any:
    """A boto3 S3 client for `url` (short timeouts, no retries: outages fail fast)."""
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=url,
        region_name="us-east-1",
        config=Config(connect_timeout=1, read_timeout=5, retries={"max_attempts": 1}),
    )


@pytest.fixture
def s3(moto_url: str, aws_env: None) -> Any:
    """A moto S3 client straight to the server (the test's view of the bucket)."""
    return s3_client(moto_url)


@pytest.fixture
def bucket(s3: Any) -> Iterator[str]:
    """A fresh bucket of this test's own."""
    name = f"audit-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name)
    yield name
    found = keys(s3, name)
    for start in range(0, len(found), 1000):
        batch = [{"Key": key} for key in found[start : start + 1000]]
        s3.delete_objects(Bucket=name, Delete={"Objects": batch})
    s3.delete_bucket(Bucket=name)


@pytest.fixture
def relay(moto_url: str) -> Iterator[Relay]:
    """A relay in front of moto that a test can take down."""
    parts = urlsplit(moto_url)
    with Relay((parts.hostname or "127.0.0.1", parts.port or 80)) as relay:
        yield relay


@pytest.fixture
def archivers() -> Iterator[list[AuditArchiver]]:
    """Archivers started by a test; stopped at its end."""
    started: list[AuditArchiver] = []
    yield started
    for archiver in started:
        archiver.stop()


def keys(s3: Any, bucket: str) -> list[str]:
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket)
    return sorted(item["Key"] for page in pages for item in page.get("Contents", []))


def start_archiver(
    store: Store,
    url: str,
    bucket: str,
    archivers: list[AuditArchiver],
    puts: list[str] | None = None,
    **options: Any,
) -> AuditArchiver:
    """An archiver on its own client; the keys it uploads go to `puts` from the start."""
    client = s3_client(url)
    if puts is not None:
        client.meta.events.register(
            "before-parameter-build.s3.PutObject", lambda params, **_: puts.append(params["Key"])
        )
    archiver = AuditArchiver(
        store.sessions,
        S3Archive(bucket, PREFIX, client=client),
        batch_size=options.pop("batch_size", 20),
        idle_seconds=0.2,
        max_backoff_seconds=0.2,
        **options,
    )
    archiver.start()
    archivers.append(archiver)
    return archiver


def write_entries(store: Store, count: int, *, at: datetime | None = None) -> list[AuditRecord]:
    """`count` entries in one transaction: item entries and one without an item."""
    records = [
        AuditRecord(
            "phase_changed",
            "wq-host:1/worker-0",
            uuid.uuid4(),
            old_state={"phase": "active", "admission": "admitted"},
            new_state={"phase": "completed", "admission": "admitted"},
            trigger={"source": "worker", "action": "ensure_mr"},
            **({"at": at} if at else {}),
        )
        for _ in range(count - 1)
    ]
    records.append(
        AuditRecord(
            "auth_failed",
            "anonymous",
            trigger={"source": "api", "reason": "no bearer token"},
            metadata={"method": "GET", "route": "/api/work-items", "status": 401},
            **({"at": at} if at else {}),
        )
    )
    with store.sessions.begin() as session:
        audit(session, *records)
    return records


def unarchived(store: Store) -> int:
    with store.sessions() as session:
        return int(
            session.scalar(
                select(func.count()).select_from(AuditEntry).where(AuditEntry.archived_at.is_(None))
            )
            or 0
        )


def all_rows(store: Store) -> list[AuditEntry]:
    with store.sessions() as session:
        return list(session.scalars(select(AuditEntry).order_by(AuditEntry.id)))


def read_object(s3: Any, bucket: str, key: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The object's JSON (gunzipped by hand: S3 hands the stored bytes back) and headers."""
    got = s3.get_object(Bucket=bucket, Key=key)
    raw = got["Body"].read()
    text = gzip.decompress(raw).decode()
    assert text.endswith("\n") and text.count("\n") == 1  # one JSON line, as Athena reads
    return json.loads(text), got


def test_each_entry_becomes_one_gzipped_json_object_under_the_date_path(
    store: Store, moto_url: str, s3: Any, bucket: str, archivers: list[AuditArchiver]
) -> None:
    # A time whose fields all differ (year, month, day, hour, minute, second), written
    # out below: a key with two of them swapped cannot match it.
    at = datetime(2025, 3, 14, 9, 26, 53, 589793, tzinfo=UTC)
    records = write_entries(store, 5, at=at)
    start_archiver(store, moto_url, bucket, archivers)
    wait_for(lambda: unarchived(store) == 0, timeout=20, message="entries archived")

    rows = {row.id: row for row in all_rows(store)}
    found = keys(s3, bucket)
    assert len(found) == len(rows) == len(records)
    for key in found:
        match = KEY.match(key)
        assert match, key
        row = rows[int(match["id"])]
        assert match["path"] == "2025/03/14/09/26"
        assert match["timestamp"] == "2025-03-14T09:26:53.589793Z"
        assert match["item"] == (str(row.work_item_id) if row.work_item_id else "none")
        assert match["event"] == row.event_type
        entry, got = read_object(s3, bucket, key)
        assert got["ContentEncoding"] == "gzip"
        assert got["ContentType"] == "application/json"
        expected = {
            "id": row.id,
            "timestamp": match["timestamp"],
            "event_type": row.event_type,
            "actor": row.actor,
            "trigger": row.trigger,
        }
        if row.work_item_id:
            expected |= {
                "work_item_id": str(row.work_item_id),
                "old_state": row.old_state,
                "new_state": row.new_state,
            }
        else:
            expected |= {"metadata": row.extra}  # no item, no state: left out, not null
        assert entry == expected
        assert row.archived_at is not None and row.archive_claimed_until is None


def test_an_outage_delays_archival_blocks_nothing_and_loses_nothing(
    store: Store,
    s3: Any,
    bucket: str,
    relay: Relay,
    archivers: list[AuditArchiver],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="wq.engine.archive")
    failures_before = metrics.DEFAULT.audit_s3_upload_failures._value.get()
    relay.down()
    archiver = start_archiver(store, relay.url, bucket, archivers)
    for _ in range(3):  # state changes commit as usual while S3 is unreachable
        write_entries(store, 4)
    wait_for(
        lambda: metrics.DEFAULT.audit_s3_upload_failures._value.get() >= failures_before + 12,
        timeout=20,
        message="failed attempts counted",
    )
    assert relay.refused >= 1
    assert unarchived(store) == 12
    assert keys(s3, bucket) == []
    assert any("cannot archive audit entries" in r.getMessage() for r in caplog.records)
    assert archiver.archive_once().uploaded == 0

    relay.up()
    wait_for(lambda: unarchived(store) == 0, timeout=30, message="archived after the outage")
    assert len(keys(s3, bucket)) == 12
    assert any("works again" in r.getMessage() for r in caplog.records)


def test_a_restarted_archiver_resumes_where_the_last_one_stopped(
    store: Store, moto_url: str, s3: Any, bucket: str, archivers: list[AuditArchiver]
) -> None:
    write_entries(store, 3)
    first = start_archiver(store, moto_url, bucket, archivers)
    wait_for(lambda: unarchived(store) == 0, timeout=20, message="first batch archived")
    first.stop()
    write_entries(store, 4)  # while no archiver runs (a restart, a deploy)
    # A claim its archiver never settled (it died mid-upload) is taken over once it lapses.
    with store.sessions.begin() as session:
        session.execute(
            update(AuditEntry)
            .where(AuditEntry.id == select(func.max(AuditEntry.id)).scalar_subquery())
            .values(archive_claimed_until=utcnow() - timedelta(seconds=1))
        )
    puts: list[str] = []
    start_archiver(store, moto_url, bucket, archivers, puts)
    wait_for(lambda: unarchived(store) == 0, timeout=20, message="the rest archived")
    assert len(keys(s3, bucket)) == 7
    assert len(puts) == 4  # the already archived three were not uploaded again


def test_two_archivers_on_one_database_upload_each_entry_once(
    store: Store, moto_url: str, s3: Any, bucket: str, archivers: list[AuditArchiver]
) -> None:
    for _ in range(4):
        write_entries(store, 10)
    puts: list[str] = []
    for _ in range(2):
        start_archiver(store, moto_url, bucket, archivers, puts, batch_size=5)
    wait_for(lambda: unarchived(store) == 0, timeout=30, message="all archived")
    assert len(keys(s3, bucket)) == 40
    assert sorted(puts) == sorted(set(puts)) and len(puts) == 40


def test_rearchive_uploads_a_time_range_again_and_only_that(
    store: Store, moto_url: str, s3: Any, bucket: str
) -> None:
    base = datetime(2026, 11, 30, 22, 0, tzinfo=UTC)
    write_entries(store, 2, at=base)
    write_entries(store, 3, at=base + timedelta(hours=1))
    write_entries(store, 2, at=base + timedelta(hours=3))
    archive = S3Archive(bucket, PREFIX, client=s3_client(moto_url))
    result = rearchive(
        store.sessions, archive, base + timedelta(hours=1), base + timedelta(hours=2)
    )
    assert (result.uploaded, result.failed) == (3, 0)
    assert {key.split("/")[5] for key in keys(s3, bucket)} == {"23"}
    assert unarchived(store) == 4
    again = rearchive(store.sessions, archive, base)  # everything: the three are overwritten
    assert again.uploaded == 7
    assert len(keys(s3, bucket)) == 7
    assert unarchived(store) == 0


def test_retention_keeps_entries_that_are_not_archived_yet(store: Store) -> None:
    old = utcnow() - timedelta(days=40)
    write_entries(store, 4, at=old)
    write_entries(store, 2)
    with store.sessions.begin() as session:
        first_two = select(AuditEntry.id).order_by(AuditEntry.id).limit(2).scalar_subquery()
        session.execute(
            update(AuditEntry).where(AuditEntry.id.in_(first_two)).values(archived_at=utcnow())
        )
    with store.sessions.begin() as session:
        assert prune(session, retention_days=30, now=utcnow(), keep_unarchived=True) == 2
    assert len(all_rows(store)) == 4
    with store.sessions.begin() as session:  # archival off: age alone decides
        assert prune(session, retention_days=30, now=utcnow()) == 2
    assert len(all_rows(store)) == 2


def test_items_are_processed_while_s3_is_down_and_their_entries_archived_after(
    store: Store,
    s3: Any,
    bucket: str,
    relay: Relay,
    archivers: list[AuditArchiver],
    managers: list[Any],
) -> None:
    relay.down()
    start_archiver(store, relay.url, bucket, archivers)
    behaviour = Behaviour()
    manager = ProcessingManager(store.sessions, chain_registry(behaviour), store.config)
    manager.start()
    managers.append(manager)
    ids = [
        submit(store.sessions, manager.registry, store.config, f"p/{n}").item.id  # type: ignore[union-attr]
        for n in range(3)
    ]
    wait_idle(
        store.sessions,
        ids,
        timeout=30,
        message="items processed during the outage",
    )
    assert all(behaviour.actions_of(item_id) == list(STEPS) for item_id in ids)
    written = len(all_rows(store))
    assert unarchived(store) == written and keys(s3, bucket) == []
    relay.up()
    wait_for(lambda: unarchived(store) == 0, timeout=30, message="archived after the outage")
    assert len(keys(s3, bucket)) == written


def test_the_sweep_prunes_only_archived_entries_while_archival_is_on(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    write_entries(store, 3, at=utcnow() - timedelta(days=3))
    with store.sessions.begin() as session:
        oldest = select(func.min(AuditEntry.id)).scalar_subquery()
        session.execute(
            update(AuditEntry).where(AuditEntry.id == oldest).values(archived_at=utcnow())
        )
    registry = chain_registry(Behaviour())
    archiving = make_config(store.url, audit={"retention_days": 1, "s3_bucket": "wq-audit"})
    assert sweep_once(store.sessions, registry, archiving).audit_pruned == 1
    assert len(all_rows(store)) == 2
    assert "2 audit entries past audit.retention_days (1) are kept" in caplog.text
    plain = make_config(store.url, audit={"retention_days": 1})
    assert sweep_once(store.sessions, registry, plain).audit_pruned == 2
    assert all_rows(store) == []
