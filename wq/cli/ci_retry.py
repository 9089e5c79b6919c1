"""`wq ci-retry explain`: which CI retry matcher a trace meets and what would happen.

For the people who write `handled_types.mr.job_retry`: offline, without a daemon or
GitLab. The config file is a wq config (`handled_types.mr.job_retry`) or a file with a
top-level `job_retry`; the trace is cut to `job_trace_max_bytes` as the executor cuts
it. The GitLab-side safety checks (a newer job of that name, the pipeline's job count)
are not known here: `--attempt` stands for the job's retries so far.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from wq.cli.common import (
    JsonOption,
    Output,
    OutputOption,
    fail,
    output_mode,
    read_bounded,
    usage_error,
)

if TYPE_CHECKING:
    from wq.types.mr.job_retry import JobRetryConfig, Matcher, Verdict

app = typer.Typer(
    help="CI job retry matchers (handled_types.mr.job_retry).",
    no_args_is_help=True,
    rich_markup_mode=None,
)

OUTCOMES = {
    "no_match": "no matcher matches: the job is left alone",
    "report": "report only: the matcher's action is report",
    "limit_reached": "limit reached: reported, not retried",
}


def _read_end(path: Path, size: int) -> bytes:
    """The last `size` bytes of a file or a pipe, in bounded memory: a trace can be
    gigabytes, and only its end is looked at (as the daemon streams it). A device is a
    usage error: `/dev/zero` seeks to an end of 0 and then never ends."""
    with path.open("rb") as stream:
        mode = os.fstat(stream.fileno()).st_mode
        if stat.S_ISREG(mode):
            stream.seek(max(0, stream.seek(0, os.SEEK_END) - size))
            return stream.read()
        if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
            usage_error(f"--trace: {path} is not a file or a pipe")
        end = b""
        while chunk := stream.read(1 << 20):
            end = (end + chunk)[-size:]
        return end


def _load(path: Path) -> tuple[JobRetryConfig, int]:
    """The parsed block and the trace byte limit; exits 1 with one line when invalid."""
    import yaml

    from wq.engine.config_yaml import load_yaml
    from wq.types.mr.job_retry import DEFAULT_TRACE_MAX_BYTES
    from wq.types.mr.job_retry_parse import JobRetryConfigError, parse_job_retry

    try:
        with path.open("rb") as stream:
            data = load_yaml(read_bounded("-c", str(path), stream).decode("utf-8"))
    except OSError as err:
        usage_error(f"cannot read {path}: {err.strerror or err}")
    except UnicodeDecodeError as err:
        fail(f"config {path}: not UTF-8 text (byte {err.start})", 1)
    except yaml.YAMLError as err:
        fail(f"config {path}: not valid YAML: {str(err).splitlines()[0]}", 1)
    mr = ((data or {}).get("handled_types") or {}).get("mr") if isinstance(data, dict) else None
    if isinstance(mr, dict) and "job_retry" in mr:
        block, prefix, limit = (
            mr["job_retry"],
            "handled_types.mr.job_retry",
            mr.get("job_trace_max_bytes", DEFAULT_TRACE_MAX_BYTES),
        )
    elif isinstance(data, dict) and "job_retry" in data:
        block, prefix, limit = data["job_retry"], "job_retry", DEFAULT_TRACE_MAX_BYTES
    else:
        fail(f"config {path}: no handled_types.mr.job_retry (nor a top-level job_retry)", 1)
    if isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0:
        fail(f"config {path}: handled_types.mr.job_trace_max_bytes: must be an integer > 0", 1)
    try:
        return parse_job_retry(block, prefix), limit
    except JobRetryConfigError as err:
        fail(f"config {path}: {err}", 1)


def _node(node: Matcher, trace_text: str | None) -> dict[str, Any]:
    """The winning node with every inherited field resolved."""
    from wq.types.mr.job_retry import format_duration, trace_lines

    lines = trace_lines(trace_text, node.tail_lines) if trace_text is not None else []
    text = "\n".join(lines)
    return {
        "path": node.path,
        "name": node.name,
        "description": node.description,
        "failure_reason": node.failure_reason,
        "job_name": node.job_name.pattern if node.job_name is not None else None,
        "messages": [
            {"pattern": pattern.source, "found": pattern.found_in(lines, text)}
            for pattern in node.messages
        ],
        "tail_lines": node.tail_lines,
        "action": node.action,
        "retry_limit": node.retry_limit,
        "retry_delays": [format_duration(delay) for delay in node.retry_delays],
    }


def _document(verdict: Verdict, trace_read: bool, trace_text: str, attempt: int) -> dict[str, Any]:
    from wq.types.mr.job_retry import format_duration

    if verdict.outcome == "retry":
        outcome = "retry_now" if verdict.delay <= 0 else "retry_after_delay"
    else:
        outcome = verdict.outcome
    return {
        "matcher": _node(verdict.node, trace_text) if verdict.node is not None else None,
        "outcome": outcome,
        "delay": format_duration(verdict.delay) if verdict.outcome == "retry" else None,
        "attempt": attempt,
        "trace_read": trace_read,
    }


def _render(document: dict[str, Any], _wide: bool) -> Any:
    from rich.text import Text

    lines = []
    node = document["matcher"]
    if node is None:
        lines.append("matcher:  none")
    else:
        lines.append(f"matcher:  {node['name'] or '(unnamed)'}  at {node['path']}")
        for key in ("description", "failure_reason", "job_name", "tail_lines", "action"):
            if node[key] is not None:
                lines.append(f"  {key + ':':<16}{node[key]}")
        for message in node["messages"]:
            mark = "found" if message["found"] else "not found"
            lines.append(f"  {'message:':<16}{message['pattern']}  ({mark})")
        lines.append(f"  {'retry_limit:':<16}{node['retry_limit']}")
        lines.append(f"  {'retry_delays:':<16}{', '.join(node['retry_delays'])}")
    read = "read" if document["trace_read"] else "not needed (decided without messages)"
    lines.append(f"trace:    {read}")
    outcome = document["outcome"]
    if outcome == "retry_now":
        said = f"retry now (attempt {document['attempt']}, delay 0)"
    elif outcome == "retry_after_delay":
        said = f"retry after {document['delay']} (attempt {document['attempt']})"
    else:
        said = OUTCOMES[outcome]
    lines.append(f"outcome:  {said}")
    return Text("\n".join(lines))


@app.command("explain")
def explain(
    config: Annotated[
        Path, typer.Option("--config", "-c", metavar="<path>", help="wq config or job_retry file")
    ],
    trace: Annotated[Path, typer.Option("--trace", help="A job trace (log) file")],
    failure_reason: Annotated[
        str | None,
        typer.Option("--failure-reason", help="GitLab's failure_reason, e.g. script_failure"),
    ] = None,
    job_name: Annotated[str, typer.Option("--job-name", help="The job's name")] = "",
    attempt: Annotated[
        int, typer.Option("--attempt", min=0, help="The job's retries so far (0: first run)")
    ] = 0,
    output: OutputOption = Output.table,
    json_flag: JsonOption = False,
) -> None:
    """Show which matcher a trace meets (inherited fields resolved) and what would happen."""
    from wq.cli.output import emit
    from wq.types.mr.job_retry import decide, trace_tail

    parsed, max_bytes = _load(config)
    try:
        raw = _read_end(trace, max_bytes + 1)
    except OSError as err:
        usage_error(f"cannot read {trace}: {err.strerror or err}")
    text = trace_tail(raw, max_bytes)
    reason = failure_reason or None
    trace_read = parsed.needs_trace(reason, job_name)
    verdict = decide(parsed, reason, job_name, text if trace_read else None, attempt)
    document = _document(verdict, trace_read, text, attempt)
    emit(document, output_mode(output, json_flag), _render)


def register(root: typer.Typer) -> None:
    """Add `wq ci-retry`."""
    root.add_typer(app, name="ci-retry")
