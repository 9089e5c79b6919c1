"""`wq replicas`: every daemon sharing the database, its heartbeat and its load."""

from __future__ import annotations

from typing import Any

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
)
from wq.cli.live import follow
from wq.cli.output import age, emit, table, text
from wq.client.shown import workers_and_leases


def _events(replica: dict[str, Any]) -> str:
    if not replica["consumes_events"]:
        return "no"
    last = replica.get("last_event_at")
    return f"last {age(last)} ago" if last else "none yet"


def _state(replica: dict[str, Any]) -> str:
    if replica["state"] == "lost" and replica["being_rescued"]:
        return f"lost ({replica['being_rescued']} being rescued)"
    return str(replica["state"])


def replicas_view(replicas: list[dict[str, Any]], wide: bool) -> Any:
    """Replicas as a table: alive first, with the age of their last heartbeat."""
    columns = ["REPLICA", "STATE", "HEARTBEAT", "WORKERS", "LEASES", "EVENTS", "DB RTT", "UP"]
    if wide:
        columns += ["VERSION", "HOST", "PID"]
    view = table(*columns, leave_out=("UP", "DB RTT", "EVENTS"))
    for replica in replicas:
        rtt = replica.get("db_round_trip_ms")
        row = [
            replica["id"],
            _state(replica),
            f"{age(replica['heartbeat_age_seconds'])} ago",
            *workers_and_leases(replica),
            _events(replica),
            "-" if rtt is None else f"{rtt:.1f} ms",
            # A lost one stopped with its last heartbeat: it is not up.
            "-" if replica["state"] == "lost" else age(replica.get("started_at")),
        ]
        if wide:
            row += [replica["version"], replica["host"], text(replica["pid"])]
        view.add_row(*row)
    if not replicas:
        view.caption = "no replica has written a heartbeat"
    return view


def replicas(
    output: OutputOption = Output.table,
    json_flag: JsonOption = False,
    watch_flag: WatchOption = False,
    interval: IntervalOption = 2.0,
    url: UrlOption = None,
    no_auth: NoAuthOption = False,
) -> None:
    """Every daemon sharing the database: alive, or lost when its heartbeat stopped
    (its leases are then being rescued by the others), with its workers and events."""
    mode = output_mode(output, json_flag)
    with errors(), client(url, no_auth) as api:
        if watch_flag:
            follow(mode, api.replicas, replicas_view, interval=interval, key="id")
        else:
            emit(api.replicas(), mode, replicas_view)


def register(app: typer.Typer) -> None:
    """Add `wq replicas`."""
    app.command("replicas")(replicas)
