"""`wq submit mr`: the desired state of a merge request, with local files.

File contents are read as bytes: UTF-8 text is sent as text, anything else as
base64, so binary files arrive unchanged. Submitting the same content again is
`unchanged`; changed content is `updated` (a new generation).
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Annotated, Any

import typer

from wq.cli.common import Output, read_bounded, usage_error
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
from wq.client.utf8 import is_utf8


def _pair(flag: str, value: str) -> tuple[str, str]:
    left, sep, right = value.partition(":")
    if not sep or not left or not right:
        usage_error(f"{flag} {value!r}: expected two paths separated by ':'")
    return left, right


def _local_and_repo(flag: str, value: str) -> tuple[str, str]:
    """`LOCAL:REPO`: the local file's name may be any bytes, the repository path is sent
    and must be text (the options are left out of the command-wide check for that)."""
    local, repo = _pair(flag, value)
    if not is_utf8(repo):
        usage_error(f"{flag}: the repository path is not valid UTF-8 text")
    return local, repo


def _content(flag: str, local: str) -> dict[str, str]:
    try:
        with Path(local).expanduser().open("rb") as stream:
            data = read_bounded(flag, local, stream)
    except OSError as err:
        usage_error(f"{flag}: cannot read {local}: {err.strerror or err}")
    # Text is UTF-8 without NUL (the server refuses NUL in text, as PostgreSQL does);
    # anything else, UTF-16 text included, goes as base64.
    if b"\x00" not in data:
        try:
            return {"content": data.decode("utf-8"), "encoding": "text"}
        except UnicodeDecodeError:
            pass
    return {"content": base64.b64encode(data).decode("ascii"), "encoding": "base64"}


def file_actions(
    updates: list[str], creates: list[str], deletes: list[str], moves: list[str]
) -> list[dict[str, Any]]:
    """The Commits API actions for the file flags, in the order given per kind."""
    actions: list[dict[str, Any]] = []
    for value in updates:
        local, repo = _local_and_repo("--file", value)
        actions.append({"action": "update", "file_path": repo, **_content("--file", local)})
    for value in creates:
        local, repo = _local_and_repo("--create", value)
        actions.append({"action": "create", "file_path": repo, **_content("--create", local)})
    for repo in deletes:
        actions.append({"action": "delete", "file_path": repo})
    for value in moves:
        old, new = _pair("--move", value)
        actions.append({"action": "move", "file_path": new, "previous_path": old})
    return actions


def mr_done(item: dict[str, Any]) -> str | None:
    """An MR item is done waiting once its merge request exists."""
    url = (item.get("details") or {}).get("mr_url")
    return f"merge request: {url}" if url else None


def submit_mr(
    project: Annotated[str, typer.Option(help="GitLab project path (group/project).")],
    source_branch: Annotated[str, typer.Option(help="The MR's source branch (its identity).")],
    title: Annotated[str, typer.Option(help="MR title.")],
    commit_message: Annotated[str, typer.Option(help="Message of the commit with the files.")],
    files: Annotated[
        list[str] | None,
        typer.Option(
            "--file",
            metavar="LOCAL:REPO",
            help="Update LOCAL:REPO (repeatable).",
            show_default=False,
        ),
    ] = None,
    creates: Annotated[
        list[str] | None,
        typer.Option(
            "--create",
            metavar="LOCAL:REPO",
            help="Create LOCAL:REPO (repeatable).",
            show_default=False,
        ),
    ] = None,
    deletes: Annotated[
        list[str] | None,
        typer.Option(
            "--delete", metavar="REPO", help="Delete REPO (repeatable).", show_default=False
        ),
    ] = None,
    moves: Annotated[
        list[str] | None,
        typer.Option(
            "--move",
            metavar="OLD:NEW",
            help="Move OLD:NEW in the repo (repeatable).",
            show_default=False,
        ),
    ] = None,
    target_branch: Annotated[
        str | None, typer.Option(help="Branch to merge into (server default: main).")
    ] = None,
    description: Annotated[str | None, typer.Option(help="MR description.")] = None,
    labels: Annotated[
        list[str] | None,
        typer.Option("--label", metavar="LABEL", help="MR label (repeatable).", show_default=False),
    ] = None,
    package: Annotated[str | None, typer.Option(help="Package the change is for.")] = None,
    change_kind: Annotated[str | None, typer.Option(help="Kind of change (e.g. sync).")] = None,
    source: Annotated[str | None, typer.Option(help="Who submits (e.g. rpms-ci).")] = None,
    draft: Annotated[bool, typer.Option("--draft", help="Open the MR as a draft.")] = False,
    auto_merge: Annotated[
        bool, typer.Option("--auto-merge", help="Merge when the pipeline succeeds.")
    ] = False,
    wait: WaitOption = False,
    wait_timeout: WaitTimeoutOption = 600.0,
    output: OutputOption = Output.table,
    json_flag: JsonOption = False,
    url: UrlOption = None,
    no_auth: NoAuthOption = False,
) -> None:
    """Submit the desired state of a merge request (created, unchanged, updated or retried)."""
    actions = file_actions(files or [], creates or [], deletes or [], moves or [])
    if not actions:
        usage_error("give at least one of --file, --create, --delete or --move")
    payload: dict[str, Any] = {
        "project": project,
        "source_branch": source_branch,
        "title": title,
        "commit_message": commit_message,
        "file_actions": actions,
        "labels": list(labels or []),
        "draft": draft,
        "auto_merge": auto_merge,
    }
    optional = {
        "target_branch": target_branch,
        "description": description,
        "package": package,
        "change_kind": change_kind,
        "source": source,
    }
    payload.update({key: value for key, value in optional.items() if value is not None})
    mode = output_mode(output, json_flag)
    with errors(), client(url, no_auth) as api:
        result = api.submit("mr", payload)
        report(api, result, mode, wait=wait, wait_timeout=wait_timeout, done=mr_done)


def register(submit_app: typer.Typer) -> None:
    """Add `wq submit mr`."""
    submit_app.command("mr")(submit_mr)
