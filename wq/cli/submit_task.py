"""`wq submit task`: run a configured kind for a project (and a repository, per kind).

`--payload` takes JSON, or `@FILE` to read it from a file (`@-`: standard input).
With `--wait` the command follows the task until its run ends and exits 1 unless it
completed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from wq.cli.common import Output, printable, read_bounded, usage_error
from wq.cli.completion import complete_kind, complete_project
from wq.cli.submit import (
    JsonOption,
    NoAuthOption,
    OutputOption,
    UrlOption,
    WaitOption,
    WaitTimeoutOption,
    client,
    errors,
    output_mode,
    report,
)
from wq.client.strict_json import STRICT_JSON_HOOKS, NotAJsonNumber, RepeatedKey, depth
from wq.client.utf8 import is_utf8


def read_payload(value: str | None) -> dict[str, Any]:
    """The payload from `--payload` (JSON text, `@file` or `@-`); a usage error if bad."""
    if value is None:
        return {}
    text = value
    if value.startswith("@"):
        source = value[1:]
        if not source:
            usage_error("--payload: @ needs a file name after it (@FILE, or @- for standard input)")
        try:
            if source == "-":
                data = read_bounded("--payload", "standard input", sys.stdin.buffer)
            else:
                with Path(source).expanduser().open("rb") as stream:
                    data = read_bounded("--payload", source, stream)
            text = data.decode("utf-8")
            if not text.strip():
                name = "standard input" if source == "-" else source
                usage_error(f"--payload: {name} is empty (give a JSON object, such as {{}})")
        except OSError as err:
            usage_error(f"--payload: cannot read {source}: {err.strerror or err}")
        except UnicodeDecodeError as err:
            name = "standard input" if source == "-" else source
            usage_error(f"--payload: {name} is not UTF-8 text (byte {err.start})")
    if not is_utf8(text):  # bytes of another encoding in the argument itself
        usage_error("--payload: not valid UTF-8 text")
    try:
        payload = json.loads(text, **STRICT_JSON_HOOKS)
    except RepeatedKey as err:
        usage_error(f"--payload: the key {err.key!r} is given twice")
    except json.JSONDecodeError as err:
        usage_error(f"--payload: not JSON: {err.msg} (line {err.lineno}, column {err.colno})")
    except NotAJsonNumber as err:
        usage_error(f"--payload: {err}")
    except RecursionError:
        usage_error(f"--payload: nested deeper than {MAX_PAYLOAD_DEPTH} levels")
    if not isinstance(payload, dict):
        usage_error("--payload: must be a JSON object")
    if depth(payload) > MAX_PAYLOAD_DEPTH:
        usage_error(f"--payload: nested deeper than {MAX_PAYLOAD_DEPTH} levels")
    surrogate = _lone_surrogate(payload)
    if surrogate is not None:
        usage_error(
            f"--payload: holds text that is not valid Unicode (the lone surrogate {surrogate})"
        )
    return payload


def _lone_surrogate(payload: dict[str, Any]) -> str | None:
    """The first lone surrogate in the payload's text (a JSON escape such as `\\ud800`,
    which Python's json reads but no UTF-8 request can carry), escaped; or None."""
    try:
        json.dumps(payload, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as err:
        return f"\\u{ord(err.object[err.start]):04x}"
    return None


# No server takes a deeper payload (server.max_document_depth is at most 128); each
# server says its own, lower limit itself.
MAX_PAYLOAD_DEPTH = 128


def task_done(item: dict[str, Any]) -> str | None:
    """A task is done waiting once it completed (failed or cancelled end the wait too)."""
    if item["phase"] != "completed":
        return None
    details = item.get("details") or {}
    tail = (details.get("log_tail") or "").rstrip()
    # The run's own output: shown as text, never as terminal control sequences.
    return "completed" + (f"; output ends with:\n{printable(tail)}" if tail else "")


def submit_task(
    project: Annotated[
        str, typer.Option(help="The project the task runs for.", autocompletion=complete_project)
    ],
    kind: Annotated[
        str,
        typer.Option(
            help="A task kind the server's config declares.", autocompletion=complete_kind
        ),
    ],
    repository: Annotated[
        str | None, typer.Option(help="The repository (repository-scoped kinds only).")
    ] = None,
    payload: Annotated[
        str | None, typer.Option(help="JSON object for the run, or @FILE (@- for stdin).")
    ] = None,
    lane: Annotated[
        str | None, typer.Option(help="normal or alert (default: the kind's lane).")
    ] = None,
    dedup_key: Annotated[
        str | None, typer.Option(help="An active task with this key makes this a dedup hit.")
    ] = None,
    wait: WaitOption = False,
    wait_timeout: WaitTimeoutOption = 3600.0,
    output: OutputOption = Output.table,
    json_flag: JsonOption = False,
    url: UrlOption = None,
    no_auth: NoAuthOption = False,
) -> None:
    """Submit a task (created, or the existing one on a dedup hit)."""
    if lane is not None and lane not in ("normal", "alert"):
        usage_error(f"--lane {lane!r}: use normal or alert")
    body: dict[str, Any] = {"project": project, "kind": kind, "payload": read_payload(payload)}
    optional = {"repository": repository, "lane": lane, "dedup_key": dedup_key}
    body.update({key: value for key, value in optional.items() if value is not None})
    mode = output_mode(output, json_flag)
    with errors(), client(url, no_auth) as api:
        result = api.submit("task", body)
        report(api, result, mode, wait=wait, wait_timeout=wait_timeout, done=task_done)


def register(submit_app: typer.Typer) -> None:
    """Add `wq submit task`."""
    submit_app.command("task")(submit_task)
