"""The alert rules checked by Prometheus's own tool: `promtool check rules`, and the
unit tests under deploy/grafana/tests (each alert fires on the series that should
fire it, after its `for:`, with its labels and annotations, and stays silent on series
that should not).

Without `promtool` (the `promtool` fixture) the tests skip on a laptop and fail in CI."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
GRAFANA = ROOT / "deploy" / "grafana"
RULES = GRAFANA / "wq-alerts.yaml"
UNIT_TESTS = sorted((GRAFANA / "tests").glob("*.yaml"))


def run(promtool: str, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


def test_the_rules_pass_promtools_check(promtool: str) -> None:
    result = run(promtool, "check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_the_rules_pass_their_unit_tests(promtool: str) -> None:
    result = run(promtool, "test", "rules", *map(str, UNIT_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_is_tested_firing_and_silent() -> None:
    alerts = {
        rule["alert"]
        for group in yaml.safe_load(RULES.read_text())["groups"]
        for rule in group["rules"]
        if "alert" in rule
    }
    fires: set[str] = set()
    silent: set[str] = set()
    for path in UNIT_TESTS:
        document: dict[str, Any] = yaml.safe_load(path.read_text())
        for case in document["tests"]:
            for check in case.get("alert_rule_test", []):
                (fires if check.get("exp_alerts") else silent).add(check["alertname"])
    assert alerts - fires == set(), "alerts no unit test sees fire"
    assert alerts - silent == set(), "alerts no unit test sees stay silent"


def test_a_changed_threshold_fails_the_unit_tests(promtool: str, tmp_path: Path) -> None:
    # The unit tests guard the rules: a queue age alert at one hour instead of thirty
    # minutes no longer fires where its test expects it.
    (tmp_path / "tests").mkdir()
    rules = RULES.read_text().replace(
        "hummingbird_workqueue_pool_oldest_queued_age_seconds) > 1800",
        "hummingbird_workqueue_pool_oldest_queued_age_seconds) > 3600",
    )
    assert rules != RULES.read_text()
    (tmp_path / RULES.name).write_text(rules)
    unit = GRAFANA / "tests" / "queue-age-high.yaml"
    shutil.copy(unit, tmp_path / "tests" / unit.name)
    result = run(promtool, "test", "rules", f"tests/{unit.name}", cwd=tmp_path)
    assert result.returncode != 0
    assert "WqQueueAgeHigh" in result.stdout + result.stderr
