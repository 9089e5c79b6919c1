"""What every client command shares: option aliases, the API client, error handling.

Nothing here imports httpx or rich at import time: `wq --help` must stay fast.
"""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Annotated, Any, BinaryIO, NoReturn, TypeVar

import typer
from typer._click.globals import get_current_context  # typer ships its own click
from typer.core import TyperArgument, TyperCommand

from wq.cli.completion import complete_id
from wq.cli.output import Output as Output
from wq.cli.output import emit
from wq.cli.terminal import printable as printable

if TYPE_CHECKING:
    from wq.client.api import ApiClient
    from wq.client.errors import ClientError


UrlOption = Annotated[
    str | None,
    typer.Option(
        "--url",
        help="Server URL (default: $WQ_URL, $WORKQUEUE_SERVICE_URL, http://127.0.0.1:8080).",
        show_default=False,
    ),
]
NoAuthOption = Annotated[
    bool,
    typer.Option("--no-auth", help="Send no credentials (no env token, cache or login)."),
]
OutputOption = Annotated[
    Output,
    typer.Option("--output", "-o", help="Output format.", case_sensitive=False),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Short for -o json.")]
WatchOption = Annotated[
    bool,
    typer.Option(
        "--watch",
        "-w",
        help="Redraw in place until Ctrl-C; with -o json or yaml, print each change.",
    ),
]
ItemIdsArgument = Annotated[
    list[str] | None,
    typer.Argument(metavar="ID", help="Item ids.", show_default=False, autocompletion=complete_id),
]
ItemIdOptions = Annotated[
    list[str] | None,
    typer.Option(
        "--id",
        metavar="ID",
        help="An item id (repeatable).",
        show_default=False,
        autocompletion=complete_id,
    ),
]


class _NamedArgument(TyperArgument):
    """An argument that `--help` shows by its metavar alone."""

    def display_type_rich(self, ctx: Any) -> str | None:
        """No type after the name: typer would show a list's as `<list[str]>`."""
        return None


class ItemIdsCommand(TyperCommand):
    """A command taking item ids as arguments (`ItemIdsArgument`): its `--help` names
    them `ID`, as its usage line does (`[ID]...`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:
            if type(param) is TyperArgument and param.metavar is not None:
                # typer builds its arguments itself, with no class to choose: the
                # subclass only changes how the argument is shown.
                param.__class__ = _NamedArgument


Answer = TypeVar("Answer")
MIN_INTERVAL = 0.2
MAX_INTERVAL = 86400.0


def seconds_between_redraws(value: str) -> float:
    """`--interval`: a finite number of seconds in range (`nan` and `inf` are not)."""
    try:
        seconds = float(value)
    except ValueError:
        raise typer.BadParameter("must be a number") from None
    if not math.isfinite(seconds):
        raise typer.BadParameter("must be a number")
    # A bound above too: 1e308 would reach time.sleep and overflow.
    if not MIN_INTERVAL <= seconds <= MAX_INTERVAL:
        raise typer.BadParameter(f"must be between {MIN_INTERVAL:g} and {MAX_INTERVAL:g} seconds")
    return seconds


IntervalOption = Annotated[
    float,
    typer.Option(
        "--interval",
        parser=seconds_between_redraws,
        metavar="SECONDS",
        help="Seconds between redraws with --watch.",
    ),
]


def output_mode(output: Output, json_flag: bool) -> Output:
    """`--json` wins over `-o`."""
    return Output.json if json_flag else output


# Options whose values name local files (`--payload @FILE`, `--file LOCAL:REPO`): a file's
# name need not be UTF-8, and what of them is sent is checked where they are read.
LOCAL_FILE_OPTIONS = frozenset({"payload", "files", "creates"})


def client(url: str | None, no_auth: bool) -> ApiClient:
    """The API client for one command, once its options are known to be sendable text."""
    from wq.client.api import ApiClient

    refuse_options_not_utf8()
    return ApiClient(url, no_auth=no_auth)


def refuse_options_not_utf8() -> None:
    """A usage error naming the first option (or argument) of the running command whose
    text is not UTF-8: bytes of another encoding on the command line, which no request
    can carry (httpx would fail on them mid-request, with a traceback)."""
    from wq.client.utf8 import is_utf8

    context = get_current_context(silent=True)
    while context is not None:
        for param in context.command.params:
            if param.name is None or param.name in LOCAL_FILE_OPTIONS:
                continue
            value = context.params.get(param.name)
            values = value if isinstance(value, list | tuple) else [value]
            if any(isinstance(each, str) and not is_utf8(each) for each in values):
                option = param.param_type_name == "option"
                usage_error(
                    f"{param.opts[0] if option else param.name.upper()}: not valid UTF-8 text"
                )
        context = context.parent


def fail(message: str, code: int, hint: str | None = None) -> NoReturn:
    """Print one error line (and a hint) on stderr and exit with `code`.

    Messages carry the server's words (an item's error, a run's output): printable only.
    """
    sys.stderr.write(f"wq: error: {printable(message)}\n")
    if hint:
        sys.stderr.write(f"hint: {printable(hint)}\n")
    raise typer.Exit(code)


def usage_error(message: str) -> NoReturn:
    """A usage error found after parsing (exit 2), with the command's help named as
    click names it for the errors it finds itself."""
    context = get_current_context(silent=True)
    command = context.command_path if context is not None else "wq"
    fail(message, 2, hint=f"see {command} --help")


def project_given(value: str | None) -> str | None:
    """`--project`'s check: an empty name is a usage error (it read as every project in
    one command, as no item in another, and as a server error in a third)."""
    if value is not None and not value.strip():
        raise typer.BadParameter("an empty project name (leave --project out for every project)")
    return value


# The most a command reads from a file or a pipe it is given (a payload, a file to
# commit, a config): well above what a server takes in one request by default (16 MiB),
# and far below what would take a laptop or a CI runner down (`@/dev/zero`, a disk
# image named by mistake).
MAX_READ_BYTES = 64 * 1024 * 1024


def read_bounded(flag: str, name: str, stream: BinaryIO) -> bytes:
    """All of `stream`, or a usage error naming `flag` and `name` once it passes
    `MAX_READ_BYTES` (nothing more is read)."""
    data = stream.read(MAX_READ_BYTES + 1)
    if len(data) > MAX_READ_BYTES:
        usage_error(f"{flag}: {name} is larger than {MAX_READ_BYTES // (1024 * 1024)} MiB")
    return data


@contextlib.contextmanager
def errors() -> Iterator[None]:
    """Turn expected failures into one stderr line and the right exit code."""
    from wq.client.errors import ClientError

    try:
        yield
    except ClientError as err:
        fail(err.message, err.exit_code, err.hint)
    except KeyboardInterrupt:
        sys.stderr.write("wq: interrupted\n")
        raise typer.Exit(130) from None
    except BrokenPipeError:
        # `wq status | head`: the reader left; nothing more to say.
        with contextlib.suppress(OSError):
            sys.stdout.close()
        raise typer.Exit(0) from None


def check_type(api: ApiClient, item_type: str) -> None:
    """A usage error naming the server's types unless it knows `item_type` (`--type` of
    `wq status` and `wq stats`: the list would be empty and the counts zero, as if there
    were no such items)."""
    known = [entry["type"] for entry in api.submission_types()]
    if item_type not in known:
        usage_error(f"--type: {item_type!r} is not a type this server knows ({', '.join(known)})")


def checked_item_id(value: str) -> str:
    """A whole item id, or a short one (at least 6 hex digits) for the server to
    resolve (`wq.client.ids`); anything else is a usage error (exit 2) before any
    request (an empty id would ask for another path of the API)."""
    from wq.client.errors import UsageError
    from wq.client.ids import checked

    try:
        return checked(value)
    except UsageError as err:
        usage_error(err.message)


def act_on_items(
    ids: list[str],
    *,
    url: str | None,
    no_auth: bool,
    mode: Output,
    call: Callable[[ApiClient], Callable[[str], dict[str, Any]]],
    render: Callable[[Any, bool], Any],
    line: Callable[[dict[str, Any]], str],
    plural: str,
) -> None:
    """Call the API for each item named (a short id resolved first), then print the
    answers: documents, or one `line` each.

    An item named twice (the same id, or a short id and its whole id) is acted on once:
    a second retry or cancel of it would fail as a conflict.
    Exits with the first failure's code when any id failed (the others still ran).
    One id that fails is one error line, not that line and a count of one.
    """
    from wq.client.ids import resolve

    named = list(dict.fromkeys(ids))
    with errors(), client(url, no_auth) as api:
        action = call(api)
        if len(named) == 1:
            whole, unresolved = [resolve(api, named[0])], None
        else:
            whole, unresolved = for_each_item(named, lambda value: resolve(api, value))
        unique = list(dict.fromkeys(whole))
        if len(unique) == 1 and unresolved is None:
            # One item, however many ways it was named: its error alone, as for one id.
            done, first_error, total = [action(unique[0])], None, 1
        else:
            done, failed = for_each_item(unique, action)
            first_error = unresolved or failed
            total = len(unique) + len(named) - len(whole)
    if mode in (Output.json, Output.yaml):
        emit(done, mode, render)
    else:
        for answer in done:
            typer.echo(line(answer))
    if first_error is not None:
        fail(f"{total - len(done)} of {total} {plural} failed", first_error.exit_code)


def for_each_item(
    item_ids: list[str], call: Callable[[str], Answer]
) -> tuple[list[Answer], ClientError | None]:
    """Call the API for each id; a failing id is reported on stderr and the rest go on.

    Returns the answers and the first error. Missing credentials stop at once: every
    other id would fail the same way.
    """
    from wq.client.errors import ClientError

    answers: list[Answer] = []
    first_error: ClientError | None = None
    for item_id in item_ids:
        try:
            answers.append(call(item_id))
        except ClientError as err:
            if err.exit_code == 4 and err.status is None:
                raise
            sys.stderr.write(f"wq: error: {item_id}: {printable(err.message)}\n")
            first_error = first_error or err
    return answers, first_error
