"""`wq stats`: throughput, failures and waits over a window, as sparklines."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Annotated, Any

import typer

from wq.cli.common import (
    IntervalOption,
    JsonOption,
    NoAuthOption,
    Output,
    OutputOption,
    UrlOption,
    WatchOption,
    check_type,
    client,
    errors,
    output_mode,
    project_given,
    usage_error,
)
from wq.cli.completion import complete_project, complete_type
from wq.cli.durations import parse_seconds
from wq.cli.live import follow
from wq.cli.output import Fitted, age, emit, table

BARS = "▁▂▃▄▅▆▇█"
COUNTS = ("created", "admitted", "completed", "failed", "retried", "cancelled")
WAITS = (
    ("queued→admitted p95", "wait_p95_seconds"),
    ("admitted→done p95", "run_p95_seconds"),
)
# Steps a window is cut into by default: one character each in the sparklines.
DEFAULT_STEPS = 60
MIN_STEP_SECONDS = 10
MAX_WINDOW_SECONDS = 7 * 86400


def sparkline(values: Sequence[float | None], width: int | None = None) -> str:
    """One bar per value, scaled to the largest; a gap where there is no value.

    With `width` below the number of values, neighbouring values share a bar: the
    largest of them (a peak stays a peak)."""
    if width is not None and 0 < width < len(values):
        values = [
            max((v for v in values[start:end] if v is not None), default=None)
            for start, end in _cuts(len(values), width)
        ]
    present = [value for value in values if value is not None]
    top = max(present, default=0.0)
    bars = []
    for value in values:
        if value is None:
            bars.append(" ")
        elif top <= 0:
            bars.append(BARS[0])
        else:
            bars.append(BARS[min(len(BARS) - 1, int(value / top * (len(BARS) - 1) + 0.5))])
    return "".join(bars)


def _cuts(count: int, parts: int) -> list[tuple[int, int]]:
    """`count` positions cut into `parts` runs of as equal lengths as they can be."""
    return [(count * part // parts, count * (part + 1) // parts) for part in range(parts)]


def fitted_sparkline(values: Sequence[float | None]) -> Fitted:
    """A sparkline cell as wide as its column lets it be (one line on any terminal)."""
    return Fitted(lambda width: sparkline(values, width), widest=len(values))


def check_bounds(window: str, step: str) -> None:
    """The server's bounds, said in the user's terms before any request."""
    if parse_seconds("--window", window) > MAX_WINDOW_SECONDS:
        usage_error(f"--window: at most 7d; got {window}")
    if parse_seconds("--step", step) < MIN_STEP_SECONDS:
        usage_error(f"--step: at least {MIN_STEP_SECONDS}s; got {step}")


def default_step(window: str) -> str:
    """The step that cuts `window` into about DEFAULT_STEPS buckets (10s at least)."""
    seconds = max(MIN_STEP_SECONDS, math.ceil(parse_seconds("--window", window) / DEFAULT_STEPS))
    return f"{seconds}s"


def _series(buckets: list[dict[str, Any]], key: str) -> list[Any]:
    return [bucket.get(key) for bucket in buckets]


def stats_view(document: dict[str, Any], wide: bool) -> Any:
    """Sparklines of each series over the window, then each lane's queue now."""
    buckets = document["buckets"]
    step = age(float(document["step_seconds"]))
    view = table("SERIES", f"PER {step} OVER THE WINDOW", "TOTAL", "LAST")
    for name in COUNTS:
        values = _series(buckets, name)
        view.add_row(
            name, fitted_sparkline(values), str(sum(values)), str(values[-1] if values else 0)
        )
    for name, key in WAITS:
        values = _series(buckets, key)
        present = [value for value in values if value is not None]
        last = next((value for value in reversed(values) if value is not None), None)
        view.add_row(
            name,
            fitted_sparkline(values),
            f"max {age(max(present))}" if present else "-",
            age(last) if last is not None else "-",
        )
    lanes = table("LANE", "QUEUED", "OLDEST WAITING")
    for lane in document["lanes"]:
        lanes.add_row(lane["lane"], str(lane["depth"]), age(lane.get("oldest_wait_seconds")))
    from rich.console import Group

    return Group(view, lanes)


def stats(
    window: Annotated[
        str, typer.Option(help="How far back: 30m, 1h, 24h, 7d (at most 7d).")
    ] = "1h",
    step: Annotated[
        str | None,
        typer.Option(help="Bucket size (default: the window in 60 steps, 10s at least)."),
    ] = None,
    item_type: Annotated[
        str | None, typer.Option("--type", help="Only this type.", autocompletion=complete_type)
    ] = None,
    project: Annotated[
        str | None,
        typer.Option(
            help="Only this project.", autocompletion=complete_project, callback=project_given
        ),
    ] = None,
    output: OutputOption = Output.table,
    json_flag: JsonOption = False,
    watch_flag: WatchOption = False,
    interval: IntervalOption = 2.0,
    url: UrlOption = None,
    no_auth: NoAuthOption = False,
) -> None:
    """Items created, admitted, completed, failed, retried, cancelled over time, the
    waits, and each lane's queue now."""
    chosen_step = step or default_step(window)
    check_bounds(window, chosen_step)
    mode = output_mode(output, json_flag)
    with errors(), client(url, no_auth) as api:
        if item_type is not None:
            check_type(api, item_type)

        def fetch() -> Any:
            return api.stats(window=window, step=chosen_step, item_type=item_type, project=project)

        if watch_flag:
            follow(mode, fetch, stats_view, interval=interval, key=None)
        else:
            emit(fetch(), mode, stats_view)


def register(app: typer.Typer) -> None:
    """Add `wq stats`."""
    app.command("stats")(stats)
