"""`wq retry` and `wq cancel` with selectors: many items in one request, confirmed first.

The server lists what the selector matches (a dry run); the command shows it and asks
(`--yes` for scripts, `--dry-run` to list only), then sends the same selector with the
listed ids, so exactly what was confirmed is acted on: an item that matched only after
the list was shown is left alone.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer._click.globals import get_current_context  # typer ships its own click

from wq.cli.common import check_type, client, errors, fail, project_given, usage_error
from wq.cli.completion import complete_kind, complete_project, complete_type
from wq.cli.durations import parse_seconds
from wq.cli.output import ItemId, Output, emit, table
from wq.client.errors import EXIT_CONFLICT
from wq.client.shown import counted

if TYPE_CHECKING:
    from wq.client.api import ApiClient

MAX_LIMIT = 1000
# The API's bound on `older_than_seconds` (ten years), said as the option is typed.
MAX_OLDER_THAN_DAYS = 3650
# Every selector option of `wq retry` and `wq cancel`, in the order hints name them;
# a command names only those it has (`wq cancel` selects active items: no `--phase`).
SELECTOR_OPTIONS = ("--phase", "--type", "--project", "--kind", "--error-contains", "--older-than")

TypeOption = Annotated[
    str | None,
    typer.Option(
        "--type",
        help="Select items of this type.",
        autocompletion=complete_type,
        show_default=False,
    ),
]
ProjectOption = Annotated[
    str | None,
    typer.Option(
        help="Select items of this project.",
        autocompletion=complete_project,
        show_default=False,
        callback=project_given,
    ),
]
KindOption = Annotated[
    str | None,
    typer.Option(
        help="Select tasks of this kind.", autocompletion=complete_kind, show_default=False
    ),
]
ErrorContainsOption = Annotated[
    str | None,
    typer.Option(
        "--error-contains", help="Select items whose error holds this text.", show_default=False
    ),
]
OlderThanOption = Annotated[
    str | None,
    typer.Option(
        "--older-than",
        help="Select items in their state for longer than this (30m, 2h, 7d).",
        show_default=False,
    ),
]
LimitOption = Annotated[
    int, typer.Option(min=1, max=MAX_LIMIT, help="Act on at most this many (oldest first).")
]
YesOption = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")]
DryRunOption = Annotated[bool, typer.Option("--dry-run", help="List what would be done, only.")]


@dataclass(frozen=True)
class Selection:
    """What to act on when no ids are named."""

    phase: str | None
    type: str | None
    project: str | None
    kind: str | None
    error_contains: str | None
    older_than: str | None
    limit: int

    def given(self) -> bool:
        """Whether any selector was given (the limit alone selects nothing)."""
        fields = (self.type, self.project, self.kind, self.error_contains, self.older_than)
        return self.phase is not None or any(value is not None for value in fields)

    def body(self) -> dict[str, Any]:
        """The API's selector; a usage error for an `--older-than` the API would refuse
        (its message would name its own field, in seconds)."""
        older_than = None
        if self.older_than is not None:
            older_than = parse_seconds("--older-than", self.older_than)
            if older_than > MAX_OLDER_THAN_DAYS * 86400:
                usage_error(f"--older-than: at most {MAX_OLDER_THAN_DAYS}d; got {self.older_than}")
        return {
            "phase": self.phase,
            "type": self.type,
            "project": self.project,
            "kind": self.kind,
            "error_contains": self.error_contains,
            "older_than_seconds": older_than,
            "limit": self.limit,
        }


def _view(document: dict[str, Any], wide: bool) -> Any:
    view = table("ID", "TYPE", "OUTCOME", "WHY")
    for result in document["results"]:
        view.add_row(
            ItemId(result["id"]), result["type"], result["outcome"], result.get("error") or ""
        )
    return view


def _confirmed(action: str, count: int, yes: bool) -> bool:
    if yes:
        return True
    if not sys.stdin.isatty():
        usage_error(
            f"{action} of {counted(count, 'item')} needs --yes when nobody can answer (no terminal)"
        )
    these = "this item" if count == 1 else f"these {count} items"
    return typer.confirm(f"{action.capitalize()} {these}?", default=False, err=True)


def run(
    action: str,
    selection: Selection,
    *,
    yes: bool,
    dry_run: bool,
    mode: Output,
    url: str | None,
    no_auth: bool,
) -> None:
    """List what `selection` matches, ask, act on exactly that, and report each item."""
    done_word = {"retry": "retried", "cancel": "cancelled"}[action]
    body = selection.body()
    with errors(), client(url, no_auth) as api:
        if selection.type is not None:  # "no items match" would hide the typo
            check_type(api, selection.type)
        listed = api.bulk(action, body, dry_run=True)
        results = listed["results"]
        if not results and selection.kind is not None:
            # Checked only now: a kind taken out of the config still names its old items.
            check_kind(api, selection.kind)
        if dry_run or not results:
            if mode in (Output.json, Output.yaml):
                emit(listed, mode, _view)
            elif not results:
                sys.stderr.write("no items match\n")
            else:
                for result in results:
                    typer.echo(f"would {action} {result['id']} ({result['type']})")
            _note_more(listed)
            return
        if mode not in (Output.json, Output.yaml):
            for result in results:
                sys.stderr.write(f"  {result['id']} ({result['type']})\n")
            _note_more(listed)
        if not _confirmed(action, len(results), yes):
            fail(f"{action} not confirmed: nothing changed", 1)
        ids = [result["id"] for result in results]
        # Only the listed ids are sent: whether others match is what the listing said.
        answer = {**api.bulk(action, {**body, "ids": ids}, dry_run=False), "more": listed["more"]}
    if mode in (Output.json, Output.yaml):
        emit(answer, mode, _view)
    else:
        for result in answer["results"]:
            why = f": {result['error']}" if result.get("error") else ""
            typer.echo(f"{result['outcome']} {result['id']}{why}")
    skipped = [r for r in answer["results"] if r["outcome"] == "skipped"]
    missing = len(ids) - len(answer["results"])
    if skipped or missing:
        fail(
            f"{len(skipped) + missing} of {counted(len(ids), 'item')} not {done_word}"
            + (f" ({missing} no longer matched)" if missing else ""),
            EXIT_CONFLICT,
        )


def check_kind(api: ApiClient, kind: str) -> None:
    """A usage error naming the server's task kinds unless it runs `kind` ("no items
    match" would hide the typo, as for `--type`)."""
    known = api.task_kinds()
    if kind not in known:
        runs = ", ".join(known) if known else "it runs no tasks"
        usage_error(f"--kind: {kind!r} is not a task kind this server knows ({runs})")


def _note_more(document: dict[str, Any]) -> None:
    if document.get("more"):
        sys.stderr.write("more items match: raise --limit, or run again afterwards\n")


def ids_or_selection(ids: list[str], selection: Selection, command: str) -> bool:
    """True to act on a selection; a usage error when both or neither are given."""
    if ids and selection.given():
        usage_error(f"name items or select them, not both: wq {command} --id ID, or selectors")
    if not ids and not selection.given():
        usage_error(
            f"name at least one item (wq {command} --id ID) or select them"
            f" ({', '.join(_selector_options())})"
        )
    return not ids


def _selector_options() -> list[str]:
    """The selector options of the running command, as its --help lists them."""
    context = get_current_context(silent=True)
    if context is None:
        return list(SELECTOR_OPTIONS)
    present = {name for param in context.command.params for name in param.opts}
    return [name for name in SELECTOR_OPTIONS if name in present]
