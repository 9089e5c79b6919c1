"""`wq cancel`: cancel active items (a running task's run is stopped first)."""

from __future__ import annotations

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
    for_each_item,
    item_ids,
    output_mode,
)
from wq.cli.output import emit, table


def _view(results: list[dict[str, Any]], wide: bool) -> Any:
    view = table("ID", "ACTION", "PHASE")
    for result in results:
        view.add_row(result["item"]["id"], result["action"], result["item"]["phase"])
    return view


def cancel(
    ids: Annotated[list[str] | None, typer.Argument(help="Item ids.", show_default=False)] = None,
    id_options: Annotated[
        list[str] | None, typer.Option("--id", help="An item id (repeatable).", show_default=False)
    ] = None,
    output: OutputOption = Output.table,
    json_flag: JsonOption = False,
    url: UrlOption = None,
    no_auth: NoAuthOption = False,
) -> None:
    """Cancel active items: at once, or `requested` while a running task is stopped."""
    wanted = item_ids(ids, id_options, "cancel")
    mode = output_mode(output, json_flag)
    with errors(), client(url, no_auth) as api:
        done, first_error = for_each_item(wanted, api.cancel)
    if mode in (Output.json, Output.yaml):
        emit(done, mode, _view)
    else:
        for result in done:
            typer.echo(f"{result['action']} {result['item']['id']}: {result['item']['phase']}")
    if first_error is not None:
        fail(f"{len(wanted) - len(done)} of {len(wanted)} cancels failed", first_error.exit_code)


def register(app: typer.Typer) -> None:
    """Add `wq cancel`."""
    app.command("cancel")(cancel)
