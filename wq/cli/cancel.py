"""`wq cancel`: cancel active items (a running task's run is stopped first)."""

from __future__ import annotations

from typing import Any

import typer

from wq.cli import bulk
from wq.cli.common import (
    ItemIdOptions,
    ItemIdsArgument,
    ItemIdsCommand,
    JsonOption,
    NoAuthOption,
    Output,
    OutputOption,
    UrlOption,
    act_on_items,
    checked_item_id,
    output_mode,
)
from wq.cli.output import ItemId, table


def _view(results: list[dict[str, Any]], wide: bool) -> Any:
    view = table("ID", "ACTION", "PHASE")
    for result in results:
        view.add_row(ItemId(result["item"]["id"]), result["action"], result["item"]["phase"])
    return view


def cancel(
    ids: ItemIdsArgument = None,
    id_options: ItemIdOptions = None,
    item_type: bulk.TypeOption = None,
    project: bulk.ProjectOption = None,
    kind: bulk.KindOption = None,
    error_contains: bulk.ErrorContainsOption = None,
    older_than: bulk.OlderThanOption = None,
    limit: bulk.LimitOption = 100,
    yes: bulk.YesOption = False,
    dry_run: bulk.DryRunOption = False,
    output: OutputOption = Output.table,
    json_flag: JsonOption = False,
    url: UrlOption = None,
    no_auth: NoAuthOption = False,
) -> None:
    """Cancel active items: at once, or `requested` while a running task is stopped; the
    named ones, or the active items the selectors match (listed and confirmed first)."""
    named = [*(id_options or []), *(ids or [])]
    selection = bulk.Selection(None, item_type, project, kind, error_contains, older_than, limit)
    mode = output_mode(output, json_flag)
    if bulk.ids_or_selection(named, selection, "cancel"):
        bulk.run("cancel", selection, yes=yes, dry_run=dry_run, mode=mode, url=url, no_auth=no_auth)
        return
    act_on_items(
        [checked_item_id(value) for value in named],
        url=url,
        no_auth=no_auth,
        mode=mode,
        call=lambda api: api.cancel,
        render=_view,
        line=lambda result: f"{result['action']} {result['item']['id']}: {result['item']['phase']}",
        plural="cancels",
    )


def register(app: typer.Typer) -> None:
    """Add `wq cancel`."""
    app.command("cancel", cls=ItemIdsCommand)(cancel)
