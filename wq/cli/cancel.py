"""`wq cancel`: cancel active items (a running task's run is stopped first)."""

from __future__ import annotations

from typing import Any

import typer

from wq.cli.common import (
    ItemIdOptions,
    ItemIdsArgument,
    JsonOption,
    NoAuthOption,
    Output,
    OutputOption,
    UrlOption,
    act_on_items,
    item_ids,
    output_mode,
)
from wq.cli.output import table


def _view(results: list[dict[str, Any]], wide: bool) -> Any:
    view = table("ID", "ACTION", "PHASE")
    for result in results:
        view.add_row(result["item"]["id"], result["action"], result["item"]["phase"])
    return view


def cancel(
    ids: ItemIdsArgument = None,
    id_options: ItemIdOptions = None,
    output: OutputOption = Output.table,
    json_flag: JsonOption = False,
    url: UrlOption = None,
    no_auth: NoAuthOption = False,
) -> None:
    """Cancel active items: at once, or `requested` while a running task is stopped."""
    act_on_items(
        item_ids(ids, id_options, "cancel"),
        url=url,
        no_auth=no_auth,
        mode=output_mode(output, json_flag),
        call=lambda api: api.cancel,
        render=_view,
        line=lambda result: f"{result['action']} {result['item']['id']}: {result['item']['phase']}",
        plural="cancels",
    )


def register(app: typer.Typer) -> None:
    """Add `wq cancel`."""
    app.command("cancel")(cancel)
