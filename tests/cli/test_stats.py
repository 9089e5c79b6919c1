"""`wq stats` against a real daemon: sparklines for people, the server's document for scripts."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.daemon import RunningDaemon, cli_env, invoke
from wq.cli.stats import sparkline


def env(daemon: RunningDaemon, cache_home: Path) -> dict[str, str | None]:
    return cli_env(cache_home, WQ_URL=daemon.url, WQ_TOKEN=daemon.admin)


def test_sparklines_scale_to_the_largest_value_and_leave_gaps() -> None:
    assert sparkline([0, 1, 2, 4, 8]) == "▁▂▃▅█"
    assert sparkline([0, 0]) == "▁▁"
    assert sparkline([None, 3, None]) == " █ "
    assert sparkline([]) == ""


def test_stats_counts_what_was_submitted(daemon: RunningDaemon, cache_home: Path) -> None:
    before = invoke(["stats", "--window", "10m", "-o", "json"], env(daemon, cache_home))
    assert before.code == 0, before
    created_before = sum(b["created"] for b in json.loads(before.stdout)["buckets"])
    for _ in range(3):
        daemon.submit()
    result = invoke(["stats", "--window", "10m", "-o", "json"], env(daemon, cache_home))
    assert result.code == 0, result
    document = json.loads(result.stdout)
    with daemon.api() as http:
        served = http.get("/api/stats", params={"window": "10m", "step": "10s"}).json()
    assert set(document) == set(served)
    assert document["step_seconds"] == 10  # 10 minutes in steps of 10 s (60 steps)
    assert sum(b["created"] for b in document["buckets"]) == created_before + 3

    table = invoke(["stats", "--window", "10m"], env(daemon, cache_home))
    assert table.code == 0, table
    created = next(line for line in table.stdout.splitlines() if "created" in line)
    assert "█" in created  # the busiest step of the window is a full bar
    assert str(created_before + 3) in created.split()
    assert "normal" in table.stdout and "alert" in table.stdout


def test_a_bad_window_is_a_usage_error(daemon: RunningDaemon, cache_home: Path) -> None:
    result = invoke(["stats", "--window", "an hour"], env(daemon, cache_home))
    assert result.code == 2
    assert result.stderr.startswith("wq: error: --window: a number and a unit")
    too_long = invoke(["stats", "--window", "30d"], env(daemon, cache_home))
    assert (too_long.code, too_long.stderr.splitlines()[0]) == (
        2,
        "wq: error: --window: at most 7d; got 30d",
    )
    too_fine = invoke(["stats", "--step", "5s"], env(daemon, cache_home))
    assert (too_fine.code, too_fine.stderr.splitlines()[0]) == (
        2,
        "wq: error: --step: at least 10s; got 5s",
    )


def test_stats_of_an_unknown_type_names_the_known_ones(
    daemon: RunningDaemon, cache_home: Path
) -> None:
    # It printed zeros, as if the type had had nothing to do; `wq status` refuses it.
    result = invoke(["stats", "--type", "bogus"], env(daemon, cache_home))
    assert result.code == 2 and result.stdout == "", result
    assert result.stderr.splitlines() == [
        "wq: error: --type: 'bogus' is not a type this server knows (mr)",
        "hint: see wq stats --help",
    ]
    watched = invoke(["stats", "--type", "bogus", "--watch"], env(daemon, cache_home))
    assert watched.code == 2 and "'bogus' is not a type" in watched.stderr, watched
    known = invoke(["stats", "--type", "mr", "-o", "json"], env(daemon, cache_home))
    assert known.code == 0, known
