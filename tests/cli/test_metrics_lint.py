"""A live daemon's `/metrics`, after some work, passes `promtool check metrics`: names,
unit suffixes, help texts, counters ending `_total` (on both databases' daemons)."""

from __future__ import annotations

import subprocess

import httpx

from tests.cli.daemon import BLOCKED, RunningDaemon


def lint(promtool: str, text: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool, "check", "metrics"],
        input=text,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_daemons_metrics_pass_promtools_lint(daemon: RunningDaemon, promtool: str) -> None:
    # Some work first, so that counters and histograms have samples with labels.
    item = daemon.submit(project=BLOCKED)
    with daemon.api() as http:
        http.post(f"/api/work-items/{item['id']}/cancel").raise_for_status()
        http.post(f"/api/work-items/{item['id']}/retry").raise_for_status()
        http.get("/api/pools").raise_for_status()
    scraped = httpx.get(f"{daemon.url}/metrics", timeout=10.0)
    assert scraped.status_code == 200
    assert "hummingbird_workqueue_" in scraped.text
    result = lint(promtool, scraped.text)
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


def test_the_lint_finds_a_counter_without_its_suffix(promtool: str) -> None:
    result = lint(promtool, "# HELP wq_things Things.\n# TYPE wq_things counter\nwq_things 1\n")
    assert result.returncode != 0
    assert "_total" in result.stdout + result.stderr
