"""`wq retry`: failed or cancelled items back to active, named or selected."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from wq.cli import bulk
from wq.cli.common import (
    ItemIdOptions,
    ItemIdsArgument,
    ItemIdsCommand,
    JsonOption,
    NoAuthOption,
    OutputOption,
    UrlOption,
    act_on_items,
    checked_item_id,
    output_mode,
    usage_error,
)
from wq.cli.items import list_view
from wq.cli.output import Output
from wq.client.vocabulary import ACTIONABLE_PHASES


def _retried_line(item: dict[str, Any]) -> str:
    # Without `read` on the item's type the server answers only its id and phase.
    admission = f", {item['admission']}" if "admission" in item else ""
    return f"retried {item['id']}: {item['phase']}{admission}"


def retry(
    ids: ItemIdsArgument = None,
    id_options: ItemIdOptions = None,
    phase: Annotated[
        str | None,
        typer.Option(
            help="Select items in this phase: failed (the default with selectors) or cancelled.",
            show_default=False,
        ),
    ] = None,
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
    """Bring failed or cancelled items back to active (attempts reset): the named ones,
    or those the selectors match (listed and confirmed first)."""
    if phase is not None and phase not in ACTIONABLE_PHASES["retry"]:
        usage_error(f"--phase: retry takes failed or cancelled items, not {phase!r}")
    named = [*(id_options or []), *(ids or [])]
    selection = bulk.Selection(phase, item_type, project, kind, error_contains, older_than, limit)
    mode = output_mode(output, json_flag)
    if bulk.ids_or_selection(named, selection, "retry"):
        bulk.run("retry", selection, yes=yes, dry_run=dry_run, mode=mode, url=url, no_auth=no_auth)
        return
    act_on_items(
        [checked_item_id(value) for value in named],
        url=url,
        no_auth=no_auth,
        mode=mode,
        call=lambda api: api.retry,
        render=list_view,
        line=_retried_line,
        plural="retries",
    )


def register(app: typer.Typer) -> None:
    """Add `wq retry`."""
    app.command("retry", cls=ItemIdsCommand)(retry)
