"""`--watch`: redraw a view in place with rich Live until Ctrl-C.

When stdout is not an interactive terminal (a pipe, a log file) each frame is printed
after the previous one instead, as `kubectl get --watch` does. A server that is briefly
unreachable or failing shows its error in the view and the next poll tries again;
authentication, permission and not-found errors end the watch with their exit code,
since waiting will not fix them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import typer

from wq.cli.common import Output, printable, usage_error
from wq.cli.output import console


def check_watchable(mode: Output) -> None:
    """`--watch` draws tables; machine formats are for one snapshot."""
    if mode not in (Output.table, Output.wide):
        usage_error("--watch draws tables: use -o table or -o wide")


def watch(view: Callable[[], Any], *, interval: float) -> None:
    """Call `view()` (a rich renderable) every `interval` seconds and redraw it."""
    from rich.console import Group
    from rich.live import Live
    from rich.text import Text

    from wq.client.errors import ServerError, ServerUnreachable

    out = console()

    def frame() -> Any:
        stamp = datetime.now(UTC).strftime("%H:%M:%S")
        try:
            body = view()
            header = Text(f"every {interval:g}s, {stamp} UTC (Ctrl-C to stop)", "dim")
        except (ServerUnreachable, ServerError) as err:
            body = Text(f"error: {printable(err.message)}", "red")
            header = Text(f"retrying every {interval:g}s, {stamp} UTC", "dim")
        return Group(header, body)

    try:
        if not out.is_interactive:
            while True:
                out.print(frame())
                out.print()
                out.file.flush()
                time.sleep(interval)
        with Live(console=out, auto_refresh=False, transient=False) as live:
            while True:
                live.update(frame(), refresh=True)
                time.sleep(interval)
    except KeyboardInterrupt:
        raise typer.Exit(0) from None
