"""`wq daemon` with the audit archive on and JSON logs, as a real subprocess.

The daemon archives to a moto server over HTTP, configured the way a deployment does
it: the reference service's bucket variable and boto3's endpoint variable.
"""

from __future__ import annotations

import gzip
import json
import time
import uuid
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest

from tests.daemon.test_daemon_process import Daemon, clean_env, daemons, run_wq, start_daemon
from tests.support.waiting import wait_for

__all__ = ["daemons"]  # the fixture, imported for pytest


def json_lines(daemon: Daemon) -> list[dict[str, Any]]:
    lines = [line for line in daemon.log().splitlines() if line.strip()]
    return [json.loads(line) for line in lines]  # every line is JSON, or this fails


def listening_url(daemon: Daemon) -> str:
    def found() -> str | None:
        for line in json_lines(daemon):
            if line["message"].startswith("listening on "):
                return str(line["message"].removeprefix("listening on "))
        assert daemon.proc.poll() is None, daemon.log()
        return None

    return wait_for(found, timeout=30, message="the daemon to listen")


@pytest.mark.usefixtures("aws_env")
def test_daemon_logs_json_lines_and_archives_each_entry_to_s3(
    tmp_path: Path, daemons: list[Daemon], moto_url: str
) -> None:
    s3 = boto3.client("s3", endpoint_url=moto_url, region_name="us-east-1")
    bucket = f"daemon-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=bucket)
    env = clean_env(
        tmp_path,
        WORKQUEUE_SERVICE_AUDIT_S3_BUCKET=bucket,
        WQ_AUDIT_S3_PREFIX="prod/wq",
        AWS_ENDPOINT_URL_S3=moto_url,
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_DEFAULT_REGION="us-east-1",
    )
    daemon = start_daemon(daemons, tmp_path, env, "--log-format", "json")
    url = listening_url(daemon)
    wait_for(
        lambda: any(
            line["message"] == f"audit archive: s3://{bucket}/prod/wq/"
            for line in json_lines(daemon)
        ),
        timeout=30,
        message="the archiver's start line",
    )
    deadline = time.monotonic() + 30
    while True:  # refused without a token: an auth_failed entry
        try:
            response = httpx.get(f"{url}/api/work-items", timeout=2)
            break
        except httpx.TransportError:
            assert time.monotonic() < deadline, daemon.log()
            time.sleep(0.05)
    assert response.status_code == 401

    def archived() -> list[str]:
        listed = s3.list_objects_v2(Bucket=bucket, Prefix="prod/wq/").get("Contents", [])
        return [item["Key"] for item in listed if item["Key"].endswith("::auth_failed.json.gz")]

    (key,) = wait_for(archived, timeout=30, message="the entry archived")
    got = s3.get_object(Bucket=bucket, Key=key)
    assert (got["ContentEncoding"], got["ContentType"]) == ("gzip", "application/json")
    entry = json.loads(gzip.decompress(got["Body"].read()))
    assert entry["event_type"] == "auth_failed"
    assert entry["trigger"]["source"] == "api"
    logged = [line["audit"] for line in json_lines(daemon) if line["logger"] == "wq.audit"]
    assert [line["event_type"] for line in logged] == ["auth_failed"]
    assert {k: v for k, v in entry.items() if k != "id"} == logged[0]
    s3.delete_object(Bucket=bucket, Key=key)
    s3.delete_bucket(Bucket=bucket)


def test_daemon_told_to_archive_without_aws_credentials_refuses_to_start(
    tmp_path: Path,
) -> None:
    env = {
        key: value
        for key, value in clean_env(tmp_path, WQ_AUDIT_S3_BUCKET="wq-audit").items()
        if not key.startswith("AWS_")
    }
    env.update(
        AWS_EC2_METADATA_DISABLED="true",  # no instance role to ask for
        AWS_CONFIG_FILE=str(tmp_path / "none"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
    )
    result = run_wq("daemon", "--port", "0", env=env, cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("wq: error: audit.s3_bucket (or WQ_AUDIT_S3_BUCKET) names bucket ")
    assert "no AWS credentials" in last
    assert "Traceback" not in result.stderr
