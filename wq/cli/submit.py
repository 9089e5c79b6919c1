"""`wq submit`: lists the types the server accepts; `wq submit TYPE ...` submits one.

Each type is a module with a `register(submit_app)` function (`submit_mr.py`); a new
type adds its module to `TYPE_MODULES`. They share `report()` for the outcome, the
machine formats and `--wait`.
"""

from __future__ import annotations

import importlib
import sys
import time
from collections.abc import Callable
from typing import Annotated, Any

import typer

from wq.cli.common import (
    JsonOption,
    NoAuthOption,
    Output,
    OutputOption,
    UrlOption,
    client,
    errors,
    fail,
    output_mode,
    printable,
)
from wq.cli.output import age, dump, emit, table

TYPE_MODULES = ("wq.cli.submit_mr", "wq.cli.submit_task")

submit_app = typer.Typer(
    help="Submit a work item (without a type: list the types the server accepts).",
    invoke_without_command=True,
    rich_markup_mode=None,
)

WaitOption = Annotated[bool, typer.Option("--wait", help="Follow the item until it is done.")]
WaitTimeoutOption = Annotated[
    float, typer.Option("--wait-timeout", min=1, help="Give up waiting after this many seconds.")
]
WAIT_INTERVAL = 1.0

Done = Callable[[dict[str, Any]], str | None]
"""Whether a followed item is done: a line saying so, or None to keep waiting."""


def _types_view(types: list[dict[str, Any]], wide: bool) -> Any:
    view = table("TYPE", "ENDPOINT", *(["SUMMARY"] if wide else []))
    for entry in types:
        view.add_row(entry["type"], f"POST {entry['path']}", *([entry["summary"]] if wide else []))
    if not types:
        view.caption = "this server accepts no submissions"
    return view


@submit_app.callback()
def submit(
    ctx: typer.Context,
    output: OutputOption = Output.table,
    json_flag: JsonOption = False,
    url: UrlOption = None,
    no_auth: NoAuthOption = False,
) -> None:
    """Submit a work item (without a type: list the types the server accepts)."""
    if ctx.invoked_subcommand is not None:
        given = {"output": output, "json_flag": json_flag, "url": url, "no_auth": no_auth}
        _pass_on(ctx, ctx.invoked_subcommand, given)
        return
    # The list comes from the OpenAPI document, which needs no credentials whatever
    # --no-auth says: none are sent, and none are looked for.
    with errors(), client(url, True) as api:
        emit(api.submission_types(), output_mode(output, json_flag), _types_view)


def _pass_on(ctx: typer.Context, command: str, options: dict[str, Any]) -> None:
    """The options given before the type (`wq submit --url X mr ...`) become the type
    command's defaults: its own still win, and none is dropped (the item went to the
    default server, or printed a table for `--json`)."""
    from typer._click.core import ParameterSource  # typer ships its own click

    given = {
        name: value.value if isinstance(value, Output) else value
        for name, value in options.items()
        if ctx.get_parameter_source(name) not in (None, ParameterSource.DEFAULT)
    }
    ctx.default_map = {command: given}


def _item_line(action: str, item: dict[str, Any]) -> str:
    if "type" not in item:  # a caller without `read` on the type learns id and phase
        return f"{action} item {item['id']}: {item['phase']}"
    return (
        f"{action} {item['type']} item {item['id']}: project {item['project']}, "
        f"{item['phase']}, {item['admission']}"
    )


def report(
    api: Any,
    result: dict[str, Any],
    mode: Output,
    *,
    wait: bool,
    wait_timeout: float,
    done: Done,
) -> None:
    """Print a submission's outcome; with `wait`, follow the item until `done` says so.

    Machine formats print one document, `{"action", "item"}`, the item as last seen.
    A followed item that fails or is cancelled exits 1; a wait that times out exits 1;
    Ctrl-C exits 130 saying how to follow the item, which goes on.
    """
    action, item = result["action"], result["item"]
    machine = mode in (Output.json, Output.yaml)
    if not machine:
        typer.echo(_item_line(action, item))
    if not wait:
        if machine:
            emit(result, mode, _types_view)
        return
    try:
        item, outcome = _follow(api, action, item, mode, wait_timeout=wait_timeout, done=done)
    except KeyboardInterrupt:
        # The server goes on with the item: say so, and how to follow it again.
        sys.stderr.write(
            f"wq: interrupted; item {item['id']} keeps going: "
            f"follow it with wq status --id {item['id']} --watch\n"
        )
        raise typer.Exit(130) from None
    if machine:
        typer.echo(dump({"action": action, "item": item}, mode), nl=False)
    if outcome is None:
        error = item.get("error")
        fail(f"item {item['id']} ended {item['phase']}" + (f": {error}" if error else ""), 1)
    if not machine:
        typer.echo(printable(outcome))


def _follow(
    api: Any,
    action: str,
    item: dict[str, Any],
    mode: Output,
    *,
    wait_timeout: float,
    done: Done,
) -> tuple[dict[str, Any], str | None]:
    """Poll the item until `done` says so or it ends; each change of its progress until
    then is one line on stderr (a pipe or a log gets no redraws). The item as last seen
    and `done`'s line."""
    started = time.monotonic()
    deadline = started + wait_timeout
    shown = ""
    outcome = done(item)
    while True:
        if outcome is not None or item["phase"] != "active":
            # The end is the caller's to say (stdout, or the failure): not twice.
            return item, outcome
        now = progress(item, api.queue_position(item))
        if now != shown:
            sys.stderr.write(f"[{age(time.monotonic() - started)}] {printable(now)}\n")
            sys.stderr.flush()
            shown = now
        if time.monotonic() > deadline:
            if mode in (Output.json, Output.yaml):
                typer.echo(dump({"action": action, "item": item}, mode), nl=False)
            fail(f"still waiting after {wait_timeout:g}s: item {item['id']} is {item['phase']}", 1)
        time.sleep(WAIT_INTERVAL)
        item = api.item(item["id"])
        outcome = done(item)


def progress(item: dict[str, Any], queue_entry: dict[str, Any] | None) -> str:
    """Where a followed item is: queued (at which position), admitted, running, idle
    (waiting for something outside), or its final phase."""
    if item["phase"] != "active":
        return str(item["phase"])
    admission = item.get("admission")
    if admission == "queued":
        if queue_entry is None:
            return "queued"
        return (
            f"queued at position {queue_entry['position']} in the "
            f"{queue_entry['lane']} lane of {item['project']}"
        )
    details = item.get("details") or {}
    if details.get("started_at") and not details.get("finished_at"):
        return "running"
    return str(admission)


def register(app: typer.Typer) -> None:
    """Add `wq submit` and its per-type commands."""
    for name in TYPE_MODULES:
        importlib.import_module(name).register(submit_app)
    app.add_typer(submit_app, name="submit")


__all__ = [
    "JsonOption",
    "NoAuthOption",
    "OutputOption",
    "UrlOption",
    "WaitOption",
    "WaitTimeoutOption",
    "client",
    "errors",
    "output_mode",
    "report",
    "submit_app",
]
