"""`wq pools` (per-project capacity and usage) and `wq queue` (a project's FIFO)."""

from __future__ import annotations

import sys
from collections.abc import Callable
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
    client,
    errors,
    output_mode,
    project_given,
    usage_error,
)
from wq.cli.completion import complete_project
from wq.cli.live import follow
from wq.cli.output import MACHINE, ItemId, age, emit, table, text
from wq.client.pressure import most_pressed, pressure

SORTS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "pressure": pressure,
    "name": lambda pool: pool["project"],
}


def _usage(lane: dict[str, Any]) -> str:
    return f"{lane['in_flight']}/{lane['capacity']}"


def pools_view(pools: list[dict[str, Any]], wide: bool) -> Any:
    """Pools as a table: in-flight/capacity and queued per lane."""
    columns = [
        "PROJECT",
        "NORMAL",
        "QUEUED",
        "ALERT",
        "ALERT QUEUED",
        "OLDEST QUEUED",
        "BACKING OFF",
        "FAILED",
    ]
    if wide:
        columns += ["AUTONOMOUS QUEUED", "OLDEST QUEUED AT"]
    view = table(*columns, leave_out=("ALERT QUEUED", "ALERT", "FAILED"))
    for pool in pools:
        row = [
            pool["project"],
            _usage(pool["normal"]),
            str(pool["normal"]["queued"]),
            _usage(pool["alert"]),
            str(pool["alert"]["queued"]),
            age(pool.get("oldest_queued_age_seconds")),
            str(pool.get("backing_off", 0)),
            str(pool.get("failed", 0)),
        ]
        if wide:
            row += [
                f"{pool['queued_autonomous']}/{pool['queued_autonomous_cap']}",
                text(pool.get("oldest_queued_at")),
            ]
        view.add_row(*row)
    if not pools:
        view.caption = "no project has queued or in-flight work"
    return view


def next_try(entry: dict[str, Any]) -> str:
    """For an entry backing off: when it may be admitted again, after how many failures."""
    until = age(entry.get("run_after"))
    if not until.startswith("in "):
        return ""
    failures = entry.get("attempts") or 0
    return f"{until} (backing off, {failures} failed)" if failures else until


def queue_view(entries: list[dict[str, Any]], wide: bool) -> Any:
    """A project's queue in admission order."""
    columns = ["POSITION", "LANE", "ID", "TYPE", "WAITING", "NEXT TRY"]
    if wide:
        columns += ["SEQ", "AUTONOMOUS", "QUEUED AT"]
    view = table(*columns)
    for entry in entries:
        row = [
            str(entry["position"]),
            entry["lane"],
            ItemId(entry["id"]),
            entry["type"],
            age(entry.get("queued_at")),
            next_try(entry),
        ]
        if wide:
            row += [str(entry["seq"]), text(entry["autonomous"]), text(entry.get("queued_at"))]
        view.add_row(*row)
    if not entries:
        view.caption = "nothing queued"
    return view


def pools(
    project: Annotated[
        str | None,
        typer.Option(
            help="Only this project (shown even when idle).",
            autocompletion=complete_project,
            callback=project_given,
        ),
    ] = None,
    sort: Annotated[
        str,
        typer.Option(
            help="pressure (most pressed first, as the TUI) or name.",
            autocompletion=lambda: list(SORTS),
        ),
    ] = "pressure",
    output: OutputOption = Output.table,
    json_flag: JsonOption = False,
    watch_flag: WatchOption = False,
    interval: IntervalOption = 2.0,
    url: UrlOption = None,
    no_auth: NoAuthOption = False,
) -> None:
    """Per-project pools, most pressed first: in-flight against capacity, the queue per
    lane, items backing off and failed."""
    if sort not in SORTS:
        usage_error(f"--sort: {sort!r} is not one of {', '.join(SORTS)}")
    mode = output_mode(output, json_flag)
    with errors(), client(url, no_auth) as api:

        def fetch() -> list[dict[str, Any]]:
            found = [api.pool(project)] if project else api.pools()
            return sorted(found, key=SORTS[sort])

        if watch_flag:
            follow(mode, fetch, pools_view, interval=interval, key="project")
        else:
            emit(fetch(), mode, pools_view)


def queue(
    project: Annotated[
        str | None,
        typer.Option(
            help="The project whose queue to show (default: the most pressed).",
            autocompletion=complete_project,
            callback=project_given,
        ),
    ] = None,
    lane: Annotated[str | None, typer.Option(help="Only this lane (alert or normal).")] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="Show at most this many.")] = 100,
    output: OutputOption = Output.table,
    json_flag: JsonOption = False,
    watch_flag: WatchOption = False,
    interval: IntervalOption = 2.0,
    url: UrlOption = None,
    no_auth: NoAuthOption = False,
) -> None:
    """A project's queued items in admission order (alert lane first); without
    --project, the most pressed project's (as `wq pools` lists them first)."""
    if lane is not None and lane not in ("alert", "normal"):
        usage_error(f"--lane: {lane!r} is not one of alert, normal")
    mode = output_mode(output, json_flag)
    with errors(), client(url, no_auth) as api:
        shown = project

        def fetch() -> list[dict[str, Any]]:
            # Without --project, the most pressed project once one has work; then that
            # one stays, so a watch does not jump between projects as pressures change.
            nonlocal shown
            if shown is None:
                shown = most_pressed(api.pools())
                if shown is None:
                    return []
                sys.stderr.write(f"the queue of {shown}, the most pressed project\n")
            return api.queue(shown, lane=lane, limit=limit)

        if watch_flag:
            follow(mode, fetch, queue_view, interval=interval, key="id")
            return
        entries = fetch()
        if shown is None:
            sys.stderr.write("no project has queued or in-flight work\n")
            if mode not in MACHINE:
                return
        emit(entries, mode, queue_view)


def register(app: typer.Typer) -> None:
    """Add the admission commands."""
    app.command("pools")(pools)
    app.command("queue")(queue)
