"""docs/operations.md's commands give wq what it reads: the `wq-aws` Secret's variables
configure the SQS consumer as the guide says."""

from __future__ import annotations

import os
import re

import boto3
import pytest

from tests.deploy.manifests import ROOT
from wq.engine.sqs import queue_url_from_env


def secret_literals(name: str) -> dict[str, str]:
    """The `--from-literal` keys and values of the guide's `create secret generic NAME`."""
    guide = (ROOT / "docs" / "operations.md").read_text().replace("\\\n", " ")
    (line,) = [line for line in guide.splitlines() if f"create secret generic {name} " in line]
    return dict(re.findall(r"--from-literal=(\w+)=(\S+)", line))


def test_the_aws_secret_sets_the_region_and_the_queue_for_the_consumer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for var in list(os.environ):
        if var.startswith(("AWS_", "WQ_EVENTS_", "WORKQUEUE_SERVICE_")):
            monkeypatch.delenv(var)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    literals = secret_literals("wq-aws")
    for key, value in literals.items():
        monkeypatch.setenv(key, value)
    # What the consumer's boto3 client picks up; no region is an error at its start.
    region = boto3.client("sqs").meta.region_name
    assert region and region in literals.values()
    assert queue_url_from_env() == literals["WQ_EVENTS_QUEUE_URL"]
    assert f"sqs.{region}.amazonaws.com" in literals["WQ_EVENTS_QUEUE_URL"]
