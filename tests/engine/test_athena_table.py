"""The Athena table in docs/operations.md matches what the archiver really writes.

The DDL is read from the document; an item's real entries (created, queued, admitted,
phase changed, released) and an auth refusal are archived to moto and read back.
Every JSON field must be a column of a type that reads it, and the partition template
must name the path the object is under.
"""

from __future__ import annotations

import gzip
import json
import re
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import boto3
import pytest
from sqlalchemy import select

from tests.conftest import Store
from tests.engine.helpers import submit
from tests.support.chain import Behaviour, chain_registry
from wq.engine.admission import dispatch
from wq.engine.archive import S3Archive, claim
from wq.engine.audit import AuditRecord, audit
from wq.engine.items import set_phase
from wq.engine.models import COMPLETED, WorkItem, utcnow

OPERATIONS = Path(__file__).parents[2] / "docs" / "operations.md"
JAVA_TO_STRFTIME = {"yyyy": "%Y", "MM": "%m", "dd": "%d", "HH": "%H", "mm": "%M"}


def athena_ddl() -> str:
    blocks = re.findall(r"```sql\n(CREATE EXTERNAL TABLE.*?)```", OPERATIONS.read_text(), re.S)
    assert len(blocks) == 1, "docs/operations.md must hold one CREATE EXTERNAL TABLE"
    return blocks[0]


def columns(ddl: str) -> dict[str, str]:
    body = re.search(r"CREATE EXTERNAL TABLE \w+ \((.*?)\n\)\nPARTITIONED", ddl, re.S)
    assert body, ddl
    found = re.findall(r"^\s*`(\w+)` (\S+?),?$", body.group(1), re.M)
    return dict(found)


def properties(ddl: str) -> dict[str, str]:
    return dict(re.findall(r"'([\w.]+)' = '([^']*)'", ddl))


def readable(value: Any, column_type: str) -> bool:
    """Whether Athena reads this JSON value into a column of that type."""
    if column_type == "bigint":
        return isinstance(value, int) and not isinstance(value, bool)
    if column_type == "string":
        return isinstance(value, str)
    if column_type == "map<string,string>":
        return isinstance(value, dict) and all(
            isinstance(v, str | int | float | bool) for v in value.values()
        )
    raise AssertionError(f"the test knows no column type {column_type}")


@pytest.fixture
def archived(store: Store, moto_url: str, aws_env: None) -> list[tuple[str, dict[str, Any]]]:
    """Real entries of one item's life and an auth refusal, archived to a fresh bucket."""
    s3 = boto3.client("s3", endpoint_url=moto_url, region_name="us-east-1")
    bucket = f"athena-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=bucket)
    registry = chain_registry(Behaviour())
    item_id = submit(store.sessions, registry, store.config).item.id  # type: ignore[union-attr]
    dispatch(store.sessions, store.config, clock=utcnow)
    with store.sessions.begin() as session:
        item = session.scalars(select(WorkItem).where(WorkItem.id == item_id)).one()
        set_phase(
            session, item, COMPLETED, actor="wq-host:1/worker-0", trigger={"source": "worker"}
        )
        audit(
            session,
            AuditRecord(
                "auth_failed",
                "anonymous",
                trigger={"source": "api", "reason": "no bearer token"},
                metadata={"method": "GET", "route": "/api/work-items", "status": 401},
            ),
        )
    archive = S3Archive(bucket, "audit", client=s3)
    with store.sessions.begin() as session:
        rows = claim(session, limit=100, now=utcnow())
    objects = []
    for row in rows:
        key = archive.put(row)
        raw = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        objects.append((key, json.loads(gzip.decompress(raw))))
    assert {entry["event_type"] for _, entry in objects} >= {
        "created",
        "queued",
        "admitted",
        "phase_changed",
        "released",
        "auth_failed",
    }
    return objects


def test_every_field_of_an_archived_entry_is_a_column_of_a_type_that_reads_it(
    archived: list[tuple[str, dict[str, Any]]],
) -> None:
    table = columns(athena_ddl())
    seen: set[str] = set()
    for key, entry in archived:
        assert set(entry) <= set(table), f"{key}: fields without a column"
        for field, value in entry.items():
            assert readable(value, table[field]), f"{key}: {field}={value!r} vs {table[field]}"
        seen |= set(entry)
    assert seen == set(table), "columns no entry ever fills"


def test_the_partition_projection_names_the_path_each_object_is_under(
    archived: list[tuple[str, dict[str, Any]]],
) -> None:
    ddl = athena_ddl()
    props = properties(ddl)
    location = re.search(r"LOCATION 's3://BUCKET/([^']*)'", ddl)
    assert location and location.group(1) == "audit/"
    assert props["projection.enabled"] == "true"
    assert props["projection.dt.type"] == "date"
    assert props["storage.location.template"] == "s3://BUCKET/audit/${dt}/"
    assert (props["projection.dt.interval"], props["projection.dt.interval.unit"]) == (
        "1",
        "MINUTES",
    )
    pattern = props["projection.dt.format"]
    for java, strftime in JAVA_TO_STRFTIME.items():
        pattern = pattern.replace(java, strftime)
    for key, entry in archived:
        folder = key.removeprefix("audit/").rsplit("/", 1)[0]
        assert folder == datetime.fromisoformat(entry["timestamp"]).strftime(pattern), key
