"""Parsing `handled_types.mr.job_retry` into the matcher tree, strictly (fail closed).

An unknown field, a bad regex, a bad duration or a child that could never match raises
`JobRetryConfigError`, whose message starts with the path at fault, e.g.
`job_retry.matchers[2].messages[1]`. The tree itself and the matching live in
`wq.types.mr.job_retry`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import regex

from wq.types.mr.job_retry import (
    ACTIONS,
    DEFAULT_ACTION,
    DEFAULT_RETRY_DELAYS,
    DEFAULT_RETRY_LIMIT,
    ROOT,
    JobRetryConfig,
    Matcher,
    MessagePattern,
)

_TOP_FIELDS = {"retry_delays", "retry_limit", "matchers"}
_NODE_FIELDS = {
    "name",
    "description",
    "failure_reason",
    "messages",
    "job_name",
    "tail_lines",
    "action",
    "retry_limit",
    "retry_delays",
    "matchers",
}
_DURATION = re.compile(r"^(\d+)([smh]?)$")
_UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600}


class JobRetryConfigError(ValueError):
    """The job retry config is invalid; the message starts with the path at fault."""


def parse_duration(value: Any, path: str) -> float:
    """Seconds of a duration written as "0", "30s", "5m" or "1h" (a bare number is seconds)."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise JobRetryConfigError(f'{path}: must be a duration such as "0", "30s", "5m", "1h"')
    match = _DURATION.match(str(value).strip())
    if match is None:
        raise JobRetryConfigError(
            f'{path}: invalid duration {value!r} (use "0", "30s", "5m", "1h")'
        )
    return float(int(match.group(1)) * _UNIT_SECONDS[match.group(2)])


def _mapping(value: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise JobRetryConfigError(f"{path}: must be a mapping")
    return value


def _int(value: Any, path: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise JobRetryConfigError(f"{path}: must be an integer >= {minimum}")
    return value


def _text(value: Any, path: str) -> str:
    if not isinstance(value, str) or not value:
        raise JobRetryConfigError(f"{path}: must be a non-empty string")
    return value


def _regex(source: str, path: str) -> regex.Pattern[str]:
    """`source` compiled as Python's `re` reads it (the `regex` module's version 0),
    for its search bounded in time (`job_retry.found`)."""
    try:
        return regex.compile(source, flags=regex.V0)
    except regex.error as err:
        raise JobRetryConfigError(f"{path}: invalid regex {source!r}: {err}") from None


def _delays(value: Any, path: str) -> tuple[float, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or not value:
        raise JobRetryConfigError(f"{path}: must be a non-empty list of durations")
    return tuple(parse_duration(item, f"{path}[{index}]") for index, item in enumerate(value))


def _messages(value: Any, path: str) -> tuple[MessagePattern, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or not value:
        raise JobRetryConfigError(f"{path}: must be a non-empty list of strings")
    patterns = []
    for index, item in enumerate(value):
        source = _text(item, f"{path}[{index}]")
        regex = None
        if len(source) >= 2 and source.startswith("/") and source.endswith("/"):
            regex = _regex(source[1:-1], f"{path}[{index}]")
        patterns.append(MessagePattern(source, regex))
    return tuple(patterns)


def _children(value: Any, path: str, parent: Matcher) -> tuple[Matcher, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise JobRetryConfigError(f"{path}: must be a list of matchers")
    return tuple(_node(item, f"{path}[{index}]", parent) for index, item in enumerate(value))


def _node(value: Any, path: str, parent: Matcher) -> Matcher:
    data = _mapping(value, path)
    for key in data:
        if key not in _NODE_FIELDS:
            raise JobRetryConfigError(f"{path}.{key}: unknown field")
    action = data.get("action", parent.action)
    if action not in ACTIONS:
        raise JobRetryConfigError(f"{path}.action: must be one of retry, report")
    node = Matcher(
        path=path,
        name=_text(data["name"], f"{path}.name") if "name" in data else parent.name,
        description=(
            _text(data["description"], f"{path}.description")
            if "description" in data
            else parent.description
        ),
        failure_reason=(
            _text(data["failure_reason"], f"{path}.failure_reason")
            if "failure_reason" in data
            else parent.failure_reason
        ),
        messages=(
            _messages(data["messages"], f"{path}.messages")
            if "messages" in data
            else parent.messages
        ),
        job_name=(
            _regex(_text(data["job_name"], f"{path}.job_name"), f"{path}.job_name")
            if "job_name" in data
            else parent.job_name
        ),
        tail_lines=(
            _int(data["tail_lines"], f"{path}.tail_lines", 1)
            if "tail_lines" in data
            else parent.tail_lines
        ),
        action=action,
        retry_limit=(
            _int(data["retry_limit"], f"{path}.retry_limit", 0)
            if "retry_limit" in data
            else parent.retry_limit
        ),
        retry_delays=(
            _delays(data["retry_delays"], f"{path}.retry_delays")
            if "retry_delays" in data
            else parent.retry_delays
        ),
    )
    if "matchers" in data:
        children = _children(data["matchers"], f"{path}.matchers", node)
        for child in children:
            if node.shadows(child):
                raise JobRetryConfigError(
                    f"{child.path}: can never match: it keeps every condition of its "
                    f"parent {path}, which is tried first; move the parent's conditions "
                    "into its children"
                )
        node = Matcher(**{**node.__dict__, "children": children})
    return node


def parse_job_retry(data: Any, path: str = ROOT) -> JobRetryConfig:
    """Validate a `job_retry` mapping; raise JobRetryConfigError naming the path at fault."""
    block = _mapping(data, path)
    for key in block:
        if key not in _TOP_FIELDS:
            raise JobRetryConfigError(f"{path}.{key}: unknown field")
    delays = (
        _delays(block["retry_delays"], f"{path}.retry_delays")
        if "retry_delays" in block
        else DEFAULT_RETRY_DELAYS
    )
    limit = (
        _int(block["retry_limit"], f"{path}.retry_limit", 0)
        if "retry_limit" in block
        else DEFAULT_RETRY_LIMIT
    )
    root = Matcher(
        path=path,
        name=None,
        description=None,
        failure_reason=None,
        messages=(),
        job_name=None,
        tail_lines=None,
        action=DEFAULT_ACTION,
        retry_limit=limit,
        retry_delays=delays,
    )
    matchers = _children(block.get("matchers", []), f"{path}.matchers", root)
    return JobRetryConfig(retry_delays=delays, retry_limit=limit, matchers=matchers)
