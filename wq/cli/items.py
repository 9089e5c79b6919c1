"""`wq status` (one item or a list) and `wq retry`."""

from __future__ import annotations

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
    checked_item_id,
    client,
    errors,
    output_mode,
    project_given,
    usage_error,
)
from wq.cli.completion import (
    complete_admission,
    complete_id,
    complete_phase,
    complete_project,
    complete_type,
)
from wq.cli.live import follow
from wq.cli.output import ItemId, age, emit, table, text
from wq.client.shown import attempts as attempts_shown
from wq.client.vocabulary import ADMISSIONS, PHASES


def _check_choice(name: str, value: str | None, choices: tuple[str, ...]) -> None:
    if value is not None and value not in choices:
        usage_error(f"{name}: {value!r} is not one of {', '.join(choices)}")


def _summary(item: dict[str, Any]) -> str:
    """The most telling detail of an item for a list row."""
    details = item.get("details") or {}
    for key in ("mr_url", "source_branch", "kind"):
        if details.get(key):
            return str(details[key])
    return "-"


def list_view(items: list[dict[str, Any]], wide: bool) -> Any:
    """The item list as a table."""
    columns = ["ID", "TYPE", "PROJECT", "PHASE", "ADMISSION", "ATTEMPTS", "UPDATED"]
    if wide:
        columns += ["LANE", "SEQ", "DETAIL", "ERROR"]
    # On a narrow terminal the columns that say least go first; with `-o wide`, then
    # more, so that what it was asked for (the detail and the error) stays.
    leave_out = ("ATTEMPTS", "TYPE", *(("SEQ", "LANE", "UPDATED") if wide else ()))
    view = table(*columns, leave_out=leave_out)
    for item in items:
        row = [
            ItemId(item["id"]),
            item["type"],
            item["project"],
            item["phase"],
            item["admission"],
            attempts_shown(item),
            age(item.get("updated_at")),
        ]
        if wide:
            row += [item["lane"], text(item.get("seq")), _summary(item), text(item.get("error"))]
        view.add_row(*row)
    if not items:
        view.caption = "no items"
    elif getattr(items, "more", False):
        view.caption = f"the newest {len(items)} shown; more match (--limit N, or 0 for all)"
    return view


class Listing(list[dict[str, Any]]):
    """The items a listing shows, and whether more matched (`more`) than it asked for."""

    more = False


def _position(item: dict[str, Any]) -> str:
    entry = item.get("queue_position")
    if item.get("admission") != "queued":
        return "-"
    if entry is None:
        return "queued (beyond the first 1000)"
    return f"{entry['position']} in the {entry['lane']} lane of {item['project']}"


def _not_before(item: dict[str, Any]) -> list[tuple[str, str]]:
    """When an item backing off (or waiting by its type's decision) is taken again,
    while that is still to come."""
    run_after = item.get("run_after")
    until = age(run_after)
    if item.get("phase") != "active" or not until.startswith("in "):
        return []
    return [("NOT BEFORE", f"{run_after} ({until})")]


def item_view(item: dict[str, Any], wide: bool) -> Any:
    """One item: fields, details, dimensions and the last error."""
    from rich.console import Group

    fields = [
        ("ID", item["id"]),
        ("TYPE", item["type"]),
        ("PROJECT", item["project"]),
        ("PHASE", item["phase"]),
        ("ADMISSION", item["admission"]),
        ("QUEUE POSITION", _position(item)),
        ("ATTEMPTS", attempts_shown(item)),
        ("LAST ERROR", item.get("error")),
        *_not_before(item),
        ("CREATED", f"{item['created_at']} ({age(item['created_at'])} ago)"),
        ("UPDATED", f"{item['updated_at']} ({age(item['updated_at'])} ago)"),
    ]
    if wide:
        fields += [
            (key.upper().replace("_", " "), item.get(key))
            for key in (
                "lane",
                "seq",
                "autonomous",
                "dedup_key",
                "idempotency_key",
                "queued_at",
                "admitted_at",
                "run_after",
                "leased_until",
                "lease_owner",
                "last_event_at",
            )
        ]
    summary = table("FIELD", "VALUE")
    summary.show_header = False
    for name, value in fields:
        summary.add_row(name, text(value))
    details = table("DETAIL", "VALUE", title="Details")
    for key, value in (item.get("details") or {}).items():
        if wide or value not in (None, "", [], {}):
            details.add_row(key, text(value))
    dimensions = table(
        "DIMENSION", "VARIANT", "STATUS", "PENDING UNTIL", "DETAIL", title="Dimensions"
    )
    for row in item.get("dimensions") or []:
        dimensions.add_row(
            row["dimension"],
            row["variant"] or "-",
            row["status"],
            text(row.get("pending_until")),
            text(row.get("detail")),
        )
    if not item.get("dimensions"):
        dimensions.caption = "none"
    return Group(summary, details, dimensions)


def _with_position(api: Any, item: dict[str, Any]) -> dict[str, Any]:
    """The item plus `queue_position`: its queue entry while queued, else null."""
    return {**item, "queue_position": api.queue_position(item)}


def status(
    item_id: Annotated[
        str | None,
        typer.Option(
            "--id", help="Show one item in detail.", show_default=False, autocompletion=complete_id
        ),
    ] = None,
    phase: Annotated[
        str | None,
        typer.Option(help=f"Only this phase ({', '.join(PHASES)}).", autocompletion=complete_phase),
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
    admission: Annotated[
        str | None,
        typer.Option(
            help=f"Only this admission state ({', '.join(ADMISSIONS)}).",
            autocompletion=complete_admission,
        ),
    ] = None,
    limit: Annotated[
        int, typer.Option(min=0, help="Show at most this many items (0: all); follows pages.")
    ] = 100,
    output: OutputOption = Output.table,
    json_flag: JsonOption = False,
    watch_flag: WatchOption = False,
    interval: IntervalOption = 2.0,
    url: UrlOption = None,
    no_auth: NoAuthOption = False,
) -> None:
    """Show one work item (--id) or list items, newest first."""
    _check_choice("--phase", phase, PHASES)
    _check_choice("--admission", admission, ADMISSIONS)
    mode = output_mode(output, json_flag)
    if item_id is not None and any(v is not None for v in (phase, item_type, project, admission)):
        usage_error("--id shows one item; the list filters do not apply to it")
    if item_id is not None:
        item_id = checked_item_id(item_id)
    filters: dict[str, Any] = {
        "phase": phase,
        "type": item_type,
        "project": project,
        "admission": admission,
    }
    with errors(), client(url, no_auth) as api:
        if item_type is not None:
            check_type(api, item_type)
        if item_id is not None:
            from wq.client.ids import resolve

            whole_id = resolve(api, item_id)

            def fetch() -> Any:
                return _with_position(api, api.item(whole_id))

            renderer: Any = item_view
        else:

            def fetch() -> Any:
                # One more than shown: whether the list goes on (said under the table).
                found = list(api.iter_items(limit=limit + 1 if limit else None, **filters))
                listing = Listing(found[:limit] if limit else found)
                listing.more = bool(limit) and len(found) > limit
                return listing

            renderer = list_view
        if watch_flag:
            follow(mode, fetch, renderer, interval=interval, key=None if item_id else "id")
        else:
            emit(fetch(), mode, renderer)


def register(app: typer.Typer) -> None:
    """Add `wq status`."""
    app.command("status")(status)
