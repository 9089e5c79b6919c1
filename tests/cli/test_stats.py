"""`wq stats` against a real daemon: sparklines for people, the server's document for scripts."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.daemon import RunningDaemon, base_env, cli_env, invoke, run
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
    # `0m` is a number and a unit: it was told it was not.
    nothing = invoke(["stats", "--window", "0m"], env(daemon, cache_home))
    assert (nothing.code, nothing.stderr.splitlines()[0]) == (
        2,
        "wq: error: --window: must be longer than 0; got '0m'",
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


def test_each_series_stays_on_one_line_at_80_and_60_columns() -> None:
    """At 80 columns the 60 bars of a series wrapped onto a second line (three at 60),
    so the time axis could not be read: now neighbouring steps share a bar, the peak
    kept."""
    from rich.console import Console

    from wq.cli.stats import stats_view

    counts = [0] * 60
    counts[37] = 9  # one peak
    buckets = [
        {"created": n, "admitted": 0, "completed": 0, "failed": 0, "retried": 0,
         "cancelled": 0, "wait_p95_seconds": None, "run_p95_seconds": 3.0}
        for n in counts
    ]  # fmt: skip
    document = {"buckets": buckets, "step_seconds": 60, "lanes": []}
    for width in (80, 60, 200):
        console = Console(width=width, record=True, force_terminal=False)
        console.print(stats_view(document, False))
        lines = console.export_text().splitlines()
        assert max(len(line) for line in lines) <= width
        created = [line for line in lines if line.startswith("created")]
        assert len(created) == 1, lines
        (bars,) = [word for word in created[0].split() if set(word) <= set("▁▂▃▄▅▆▇█")]
        assert bars.count("█") == 1, created  # the peak survives the resampling
        assert (len(bars) == 60) == (width == 200), bars
    assert sparkline([1, 5, 2, 0], 2) == "█▄"  # each bar the largest of its two


def test_an_output_that_cannot_encode_the_sparklines_shows_question_marks(
    daemon: RunningDaemon, tmp_path: Path
) -> None:
    """`PYTHONIOENCODING=ascii wq stats` ended in a UnicodeEncodeError traceback."""
    daemon.submit()
    ascii_only = base_env(
        tmp_path, WQ_URL=daemon.url, WQ_TOKEN=daemon.admin, PYTHONIOENCODING="ascii"
    )
    result = run(["stats", "--window", "10m"], ascii_only, tmp_path)
    assert result.code == 0, result
    assert "Traceback" not in result.stderr
    created = next(line for line in result.stdout.splitlines() if "created" in line)
    assert "?" in created  # the blocks of its sparkline
