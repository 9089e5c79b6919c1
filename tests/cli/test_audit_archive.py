"""`wq audit archive` as a real subprocess against moto over HTTP, on both databases."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from sqlalchemy import func, select

from tests.cli.daemon import cli_env, invoke
from tests.conftest import Store
from tests.daemon.test_daemon_process import clean_env, run_wq
from wq.cli.audit import parse_time
from wq.engine.audit import AuditRecord, audit
from wq.engine.models import AuditEntry


@pytest.fixture
def bucket(moto_url: str, aws_env: None) -> Iterator[tuple[Any, str]]:
    s3 = boto3.client("s3", endpoint_url=moto_url, region_name="us-east-1")
    name = f"cli-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name)
    yield s3, name
    listed = s3.list_objects_v2(Bucket=name).get("Contents", [])
    if listed:
        s3.delete_objects(
            Bucket=name, Delete={"Objects": [{"Key": item["Key"]} for item in listed]}
        )
    s3.delete_bucket(Bucket=name)


def archive_env(tmp_path: Path, store: Store, moto_url: str, **extra: str) -> dict[str, str]:
    return clean_env(
        tmp_path,
        WQ_DATABASE_URL=store.url,
        AWS_ENDPOINT_URL_S3=moto_url,
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_DEFAULT_REGION="us-east-1",
        **extra,
    )


def test_archive_since_uploads_the_range_and_marks_it_archived(
    store: Store, moto_url: str, bucket: tuple[Any, str], tmp_path: Path
) -> None:
    s3, name = bucket
    now = datetime.now(UTC)
    with store.sessions.begin() as session:
        audit(
            session,
            *(
                AuditRecord(
                    "phase_changed",
                    "system",
                    uuid.uuid4(),
                    new_state={"phase": "completed"},
                    trigger={"source": "event", "reason": "merged"},
                    at=now - timedelta(hours=hours),
                )
                for hours in (50, 3, 2, 1)
            ),
        )
    env = archive_env(tmp_path, store, moto_url, WQ_AUDIT_S3_BUCKET=name)
    result = run_wq("audit", "archive", "--since", "4h", env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("archived 3 audit entries from ")
    assert f"s3://{name}/audit/" in result.stdout
    listed = s3.list_objects_v2(Bucket=name)["Contents"]
    assert len(listed) == 3
    assert all(item["Key"].startswith("audit/") for item in listed)
    with store.sessions() as session:
        left = session.scalar(
            select(func.count()).select_from(AuditEntry).where(AuditEntry.archived_at.is_(None))
        )
    assert left == 1  # the entry from before --since


def test_archive_refuses_without_a_bucket_and_on_a_bad_time(
    store: Store, moto_url: str, tmp_path: Path
) -> None:
    env = archive_env(tmp_path, store, moto_url)
    off = run_wq("audit", "archive", "--since", "1d", env=env, cwd=tmp_path)
    assert off.returncode == 1, off.stderr
    assert off.stderr.strip().splitlines() == [
        "wq: error: audit archival is off: name a bucket in audit.s3_bucket or WQ_AUDIT_S3_BUCKET"
    ]
    bad = run_wq("audit", "archive", "--since", "yesterday", env=env, cwd=tmp_path)
    assert bad.returncode == 2
    assert "'yesterday' is not an ISO 8601 date or time" in bad.stderr
    assert "Traceback" not in off.stderr + bad.stderr


def test_parse_time_takes_iso_and_ages() -> None:
    now = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    assert parse_time("2h", now=now) == datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
    assert parse_time("7d", now=now) == datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
    assert parse_time("2026-11-30") == datetime(2026, 11, 30, tzinfo=UTC)
    assert parse_time("2026-11-30T10:00:00+02:00") == datetime(2026, 11, 30, 8, tzinfo=UTC)


@pytest.mark.parametrize(
    "since",
    [
        "99999999d",  # before the year 1
        "9" * 5000 + "s",  # beyond Python's int-from-string limit
        "0001-01-01T00:00:00+01:00",  # in UTC, before the year 1
        "9999-12-31T23:59:59-01:00",  # in UTC, after the year 9999
        "\u0663h",  # an Arabic-Indic 3 is not an age
        "2999-01-01",  # in the future: nothing to archive
    ],
)
def test_a_time_out_of_range_is_a_usage_error(tmp_path: Path, since: str) -> None:
    result = invoke(["audit", "archive", "--since", since], cli_env(tmp_path))
    assert result.code == 2, result
    assert "Traceback" not in result.stderr
    assert any(said in result.stderr for said in ("is not an ISO 8601", "too far", "in the future"))
