"""`--watch`: redraw a view in place with rich Live until Ctrl-C.

When stdout is not an interactive terminal (a pipe, a log file) each frame is printed
after the previous one instead, as `kubectl get --watch` does. A server that is briefly
unreachable or failing shows its error in the view and the next poll tries again;
authentication, permission and not-found errors end the watch with their exit code,
since waiting will not fix them.

In a machine format (`follow`), the watch streams instead: each document that is new or
changed since the last poll (an element of a list, known by its key), as one line of
JSON (NDJSON) or one YAML document after `---`, as `kubectl get -w -o json` does.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import typer

from wq.cli.common import Output, printable
from wq.cli.output import MACHINE, Renderer, console, plain_text


def follow(
    mode: Output,
    fetch: Callable[[], Any],
    render: Renderer,
    *,
    interval: float,
    key: str | None,
) -> None:
    """`--watch` in any output mode: tables redrawn (`watch`), machine formats streamed
    (`stream`). `key` names what identifies an element when `fetch` returns a list."""
    if mode not in MACHINE:
        watch(
            lambda: render(fetch(), mode is Output.wide),
            interval=interval,
            plain=mode is Output.plain,
        )
    else:
        stream(fetch, mode, interval=interval, key=key)


def stream(fetch: Callable[[], Any], mode: Output, *, interval: float, key: str | None) -> None:
    """Print what changed in `fetch()`'s answer every `interval` seconds until Ctrl-C.

    A list is streamed element by element (by `key`), anything else whole. A server
    that fails for a while is said once on stderr, not on stdout (which stays a stream
    of documents), and the next poll tries again.
    """
    from wq.client.errors import ServerError, ServerUnreachable

    shown: dict[Any, Any] = {}
    failing: str | None = None
    try:
        while True:
            try:
                answer = fetch()
            except (ServerUnreachable, ServerError) as err:
                if err.message != failing:
                    failing = err.message
                    sys.stderr.write(
                        f"wq: error: {printable(err.message)} (retrying every {interval:g}s)\n"
                    )
            else:
                failing = None
                parts = answer if key is not None else [answer]
                now = {part[key] if key is not None else None: part for part in parts}
                for ident, part in now.items():
                    if _moved(shown.get(ident), part):
                        sys.stdout.write(_streamed(part, mode))
                shown = now
                sys.stdout.flush()
            time.sleep(interval)
    except KeyboardInterrupt:
        raise typer.Exit(0) from None


def _moved(before: Any, now: Any) -> bool:
    """Whether a streamed document changed: an age the server works out from the clock
    (`oldest_queued_age_seconds`) grows at every poll and is no change by itself."""

    def steady(document: Any) -> Any:
        if not isinstance(document, dict):
            return document
        return {k: v for k, v in document.items() if not k.endswith("_age_seconds")}

    return before is None or steady(before) != steady(now)


def _streamed(document: Any, mode: Output) -> str:
    """One document of a stream: a line of JSON, or a YAML document."""
    if mode is Output.yaml:
        import yaml

        return "---\n" + yaml.safe_dump(document, sort_keys=False, allow_unicode=True)
    return json.dumps(document, ensure_ascii=False, separators=(",", ":")) + "\n"


def watch(view: Callable[[], Any], *, interval: float, plain: bool = False) -> None:
    """Call `view()` (a rich renderable) every `interval` seconds and redraw it;
    `plain` (or stdout not a terminal): print each frame after the last, plain."""
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
        if plain or not out.is_interactive:
            while True:
                sys.stdout.write(plain_text(frame()))
                sys.stdout.flush()
                time.sleep(interval)
        with Live(console=out, auto_refresh=False, transient=False) as live:
            while True:
                live.update(frame(), refresh=True)
                time.sleep(interval)
    except KeyboardInterrupt:
        raise typer.Exit(0) from None
