"""A real Prometheus server on loopback scrapes a real `wq daemon` (the embedded
default) while tasks run; what the dashboard and the alerts use is queried back through
Prometheus's HTTP API, and one alert's expression is evaluated there.

Without the `prometheus` binary (Debian's `prometheus` package, installed by
`.ci/run`) the test skips on a laptop and fails in CI."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.conftest import REQUIRE_PG
from tests.daemon.test_daemon_process import (  # noqa: F401 - fixtures
    clean_env,
    daemons,
    no_system_config,
    read_token,
    start_daemon,
)
from tests.support.runs import cancel_runs_under

RULES = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "wq-alerts.yaml"
DEADLINE = 90.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def prometheus_scraping(target: str, root: Path) -> Iterator[str]:
    """A Prometheus server scraping `target` (host:port) every second; its URL."""
    binary = shutil.which("prometheus")
    if binary is None:
        message = "prometheus is not installed (Debian package `prometheus`)"
        if REQUIRE_PG:
            pytest.fail(message)
        pytest.skip(message)
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [{"job_name": "wq", "static_configs": [{"targets": [target]}]}],
    }
    (root / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    with (root / "prometheus.log").open("wb") as log:
        proc = subprocess.Popen(
            [
                binary,
                f"--config.file={root / 'prometheus.yml'}",
                f"--storage.tsdb.path={root / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def query(prometheus: str, expr: str) -> list[dict[str, Any]]:
    response = httpx.get(f"{prometheus}/api/v1/query", params={"query": expr}, timeout=5.0)
    response.raise_for_status()
    result: list[dict[str, Any]] = response.json()["data"]["result"]
    return result


def eventually(found: Callable[[], list[dict[str, Any]]], what: str) -> list[dict[str, Any]]:
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            result = found()
            if result:
                return result
        time.sleep(0.5)
    raise AssertionError(f"Prometheus never had {what}")


def alert_expr(name: str) -> str:
    for group in yaml.safe_load(RULES.read_text())["groups"]:
        for rule in group["rules"]:
            if rule.get("alert") == name:
                return str(rule["expr"])
    raise AssertionError(f"no alert {name}")


def test_prometheus_scrapes_what_the_dashboard_and_alerts_use(
    daemons: list[Any],  # noqa: F811
    tmp_path: Path,
    no_system_config: None,  # noqa: F811
) -> None:
    daemon = start_daemon(daemons, tmp_path, clean_env(tmp_path))
    daemon.wait_healthy()
    _, token = read_token(tmp_path, daemon.url)
    headers = {"Authorization": f"Bearer {token}"}
    target = daemon.url.removeprefix("http://")
    try:
        scraped(daemon.url, headers, target, tmp_path)
    finally:
        cancel_runs_under(tmp_path)  # the long sleep outlives the daemon by design


def scraped(url: str, headers: dict[str, str], target: str, tmp_path: Path) -> None:
    """Work submitted while a real Prometheus scrapes the daemon, and its series queried."""
    with prometheus_scraping(target, tmp_path) as prometheus:
        eventually(lambda: query(prometheus, 'up{job="wq"} == 1'), "the daemon up")
        # Submitted once Prometheus scrapes, so that it sees the counters rise; the long
        # sleep holds a slot of the demo pool for the pool gauges.
        work = [("echo", {"message": "hi"}), ("sleep", {"seconds": 2})] * 2
        with httpx.Client(base_url=url, headers=headers, timeout=10.0) as http:
            for kind, payload in [("sleep", {"seconds": 600}), *work]:
                body = {"project": "demo", "kind": kind, "payload": payload}
                assert http.post("/api/work-items/task", json=body).status_code == 201
        done = eventually(
            lambda: query(
                prometheus,
                'hummingbird_workqueue_phase_transitions_total{type="task", phase="completed"} > 0',
            ),
            "completed tasks counted",
        )
        assert done[0]["metric"]["type"] == "task"
        rate = eventually(
            lambda: query(
                prometheus,
                "sum by (type) (rate(hummingbird_workqueue_phase_transitions_total[1m]))",
            ),
            "a rate of transitions",
        )
        assert {series["metric"].get("type") for series in rate} >= {"task"}
        pools = eventually(
            lambda: query(prometheus, 'hummingbird_workqueue_pool_capacity{project="demo"}'),
            "the demo pool's capacity",
        )
        assert {series["metric"]["lane"] for series in pools} == {"alert", "normal"}
        http_hist = eventually(
            lambda: query(
                prometheus,
                "sum by (le) (rate(hummingbird_http_request_duration_seconds_bucket[1m]))",
            ),
            "the HTTP latency histogram",
        )
        assert any(series["metric"]["le"] == "+Inf" for series in http_hist)
        # An alert's expression as Prometheus evaluates it on these series: the failing
        # items' rule, pointed at completions (nothing failed here), names the type.
        # `increase` needs the counter to rise between two samples Prometheus took: one
        # more completion now that it has the series (under load, the first ones could
        # all fall before its first sample of it).
        with httpx.Client(base_url=url, headers=headers, timeout=10.0) as http:
            body = {"project": "demo", "kind": "echo", "payload": {"message": "again"}}
            assert http.post("/api/work-items/task", json=body).status_code == 201
        expr = alert_expr("WqItemsFailing").replace('phase="failed"', 'phase="completed"')
        fired = eventually(lambda: query(prometheus, expr), "the alert expression's result")
        assert [series["metric"] for series in fired] == [{"type": "task"}]
