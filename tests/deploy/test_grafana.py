"""The Grafana dashboard and the Prometheus alert rules name only metrics wq exports."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy.orm import sessionmaker

# The types declare their own counters on import.
import wq.types.mr.ci_metrics
import wq.types.task.grafana
import wq.types.task.schedules  # noqa: F401
from wq.engine.config import Config
from wq.engine.db import make_engine, make_sessionmaker
from wq.engine.metrics import DEFAULT_PREFIX, Metrics
from wq.engine.metrics_db import DatabaseCollector

ROOT = Path(__file__).resolve().parents[2]
GRAFANA = ROOT / "deploy" / "grafana"
NAME = re.compile(rf"\b({DEFAULT_PREFIX}[a-zA-Z0-9_]*)")
SUFFIXES = ("_bucket", "_count", "_sum", "_total")
REQUIRED_ALERTS = {
    "WqQueueAgeHigh",
    "WqItemsFailing",
    "WqSqsReceiveErrors",
    "WqNoProcessingWhileQueued",
}


@pytest.fixture
def exported(sqlite_template: Path, tmp_path: Path) -> set[str]:
    """Every metric name (families and samples) a daemon with the default prefixes exports."""
    path = tmp_path / "wq.db"
    path.write_bytes(sqlite_template.read_bytes())
    engine = make_engine(f"sqlite:///{path}", pool_size=1)
    metrics = Metrics()
    sessions: sessionmaker[Any] = make_sessionmaker(engine)
    metrics.registry.register(
        DatabaseCollector(sessions, Config(), lambda: ["mr"], prefix=metrics.service_prefix)
    )
    try:
        text = metrics.exposition().decode()
    finally:
        engine.dispose()
    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        names.add(family.name)
        names.update(sample.name for sample in family.samples)
    # A histogram or labelled counter without samples yet still has its HELP line.
    names.update(re.findall(r"^# HELP (\S+)", text, flags=re.MULTILINE))
    return names


def _expressions(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("expr", "query", "definition") and isinstance(value, str):
                yield value
            else:
                yield from _expressions(value)
    elif isinstance(node, list):
        for value in node:
            yield from _expressions(value)


def _missing(expressions: list[str], exported: set[str]) -> set[str]:
    named = {name for expression in expressions for name in NAME.findall(expression)}
    assert len(named) >= 5, f"too few metrics found, is the prefix right? {named}"

    def known(name: str) -> bool:
        if name in exported:
            return True
        return any(
            name.endswith(suffix) and name[: -len(suffix)] in exported for suffix in SUFFIXES
        )

    return {name for name in named if not known(name)}


def test_the_dashboard_names_only_exported_metrics(exported: set[str]) -> None:
    dashboard = json.loads((GRAFANA / "wq-dashboard.json").read_text())
    titles = {panel["title"] for panel in dashboard["panels"] if panel["type"] == "row"}
    assert {"Pools", "Queue age", "Throughput", "Errors", "Events"} <= titles
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    expressions = list(_expressions(dashboard))
    assert _missing(expressions, exported) == set()


def test_the_alert_rules_name_only_exported_metrics(exported: set[str]) -> None:
    rules = yaml.safe_load((GRAFANA / "wq-alerts.yaml").read_text())
    alerts = [rule for group in rules["groups"] for rule in group["rules"]]
    assert {rule["alert"] for rule in alerts} >= REQUIRED_ALERTS
    for rule in alerts:
        assert rule["expr"].strip() and rule["annotations"]["summary"], rule["alert"]
    assert _missing([rule["expr"] for rule in alerts], exported) == set()


def test_a_misspelt_metric_would_be_caught(exported: set[str]) -> None:
    # The check itself can fail: a name that is not exported is reported.
    expressions = [
        "rate(hummingbird_workqueue_executor_runs_total[5m])",
        "hummingbird_workqueue_pool_queued",
        "hummingbird_workqueue_items",
        "hummingbird_http_requests_total",
        "hummingbird_workqueue_admission_wait_seconds_bucket",
        "hummingbird_workqueue_pool_queue_depth",
    ]
    assert _missing(expressions, exported) == {"hummingbird_workqueue_pool_queue_depth"}
