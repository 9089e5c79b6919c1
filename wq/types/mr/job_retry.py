"""`handled_types.mr.job_retry`: the CI job retry matcher tree (pure: no I/O).

A port of the idea behind CKI's pipeline-herder. The config holds default
`retry_delays` and `retry_limit` and a tree of matchers. Every node inherits each
field it does not set from its parent; the conditions are `failure_reason`,
`messages` (any one of them found in the job trace) and `job_name` (a regex on the
job's name). A node matches when it has at least one condition and all of them hold.

Which node wins: the first matching node in document order (a parent before its
children, siblings top to bottom). A node without conditions is a pure group and never
matches. Since a parent is tried first, a child that keeps every condition its parent
has (it only adds conditions, or changes nothing but `action` or limits) could never
match; such a config is refused, naming the child.

Parsing the config into this tree (strict, naming the path at fault) is in
`wq.types.mr.job_retry_parse`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal

import regex

Action = Literal["retry", "report"]
ACTIONS: tuple[Action, ...] = ("retry", "report")
DEFAULT_RETRY_DELAYS: tuple[float, ...] = (0.0,)
DEFAULT_RETRY_LIMIT = 3
DEFAULT_ACTION: Action = "retry"
# How much of a trace's end the matchers see at most (`job_trace_max_bytes`).
DEFAULT_TRACE_MAX_BYTES = 1024 * 1024
ROOT = "job_retry"

# How long one pattern may search one trace or job name. Patterns come from the
# config and traces from whoever runs the job: a pattern that backtracks without end
# (`(a|aa)+$` on a long run of `a`) is given up, taken as not found, and logged, instead
# of holding a worker for ever (the search lets other threads run meanwhile).
MATCH_SECONDS = 1.0

log = logging.getLogger("wq.types.mr.job_retry")

# Colour codes and GitLab's collapsible-section markers, which sit inside trace
# lines and would otherwise split literals a person copied from the rendered log.
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]|\x1b\[0K|section_(?:start|end):\d+:[^\r\n]*?\r")


def format_duration(seconds: float) -> str:
    """A duration as the config writes it: "0", "45s", "5m", "1h"."""
    whole = int(seconds)
    for unit, size in (("h", 3600), ("m", 60)):
        if whole >= size and whole % size == 0:
            return f"{whole // size}{unit}"
    return f"{whole}s" if whole else "0"


def found(pattern: regex.Pattern[str], text: str) -> bool:
    """Whether `pattern` occurs in `text`; False, with a warning, when it takes longer
    than `MATCH_SECONDS`."""
    try:
        return pattern.search(text, timeout=MATCH_SECONDS, concurrent=True) is not None
    except TimeoutError:
        log.warning(
            "job_retry: the regex %r gave up after %gs on %d characters; taken as not found",
            pattern.pattern,
            MATCH_SECONDS,
            len(text),
        )
        return False


@dataclass(frozen=True)
class MessagePattern:
    """One entry of `messages`: a literal (per-line substring) or a `/regex/`."""

    source: str
    regex: regex.Pattern[str] | None

    def found_in(self, lines: Sequence[str], text: str) -> bool:
        """Whether the pattern occurs in the (already tail-cut) trace."""
        if self.regex is not None:
            return found(self.regex, text)
        return any(self.source in line for line in lines)


@dataclass(frozen=True)
class Matcher:
    """A node of the tree with every inherited field resolved."""

    path: str
    name: str | None
    description: str | None
    failure_reason: str | None
    messages: tuple[MessagePattern, ...]
    job_name: regex.Pattern[str] | None
    tail_lines: int | None
    action: Action
    retry_limit: int
    retry_delays: tuple[float, ...]
    children: tuple[Matcher, ...] = field(default=())

    @property
    def has_condition(self) -> bool:
        """A node without conditions only groups its children."""
        return bool(self.failure_reason or self.messages or self.job_name is not None)

    @property
    def label(self) -> str:
        """The name for audits and metrics (the path when the node has no name)."""
        return self.name or self.path

    def matches(self, failure_reason: str | None, job_name: str, trace: str | None) -> bool:
        """Whether this node's own (resolved) conditions all hold.

        `trace` None means "not fetched": a node that needs messages does not match.
        """
        if not self.has_condition:
            return False
        if self.failure_reason and self.failure_reason != failure_reason:
            return False
        if self.job_name is not None and not found(self.job_name, job_name):
            return False
        if self.messages:
            if trace is None:
                return False
            lines = trace_lines(trace, self.tail_lines)
            text = "\n".join(lines)
            if not any(pattern.found_in(lines, text) for pattern in self.messages):
                return False
        return True

    def delay_for(self, attempt: int) -> float:
        """Seconds to wait before retrying attempt `attempt` (0-based; the last repeats)."""
        index = min(max(attempt, 0), len(self.retry_delays) - 1)
        return self.retry_delays[index]

    def walk(self) -> Iterator[Matcher]:
        """The subtree in matching order: document order, the node before its children."""
        yield self
        for child in self.children:
            yield from child.walk()

    def shadows(self, child: Matcher) -> bool:
        """Whether this node matches whenever `child` does (so `child`, tried later, never
        wins): this node has conditions and `child` keeps every one of them."""
        if not self.has_condition:
            return False
        if self.failure_reason and child.failure_reason != self.failure_reason:
            return False
        if self.job_name is not None and (
            child.job_name is None or child.job_name.pattern != self.job_name.pattern
        ):
            return False
        return not self.messages or (
            child.messages == self.messages and child.tail_lines == self.tail_lines
        )


@dataclass(frozen=True)
class JobRetryConfig:
    """The parsed `job_retry` block."""

    retry_delays: tuple[float, ...]
    retry_limit: int
    matchers: tuple[Matcher, ...]

    def nodes(self) -> Iterator[Matcher]:
        """Every node in matching order."""
        for matcher in self.matchers:
            yield from matcher.walk()

    def needs_trace(self, failure_reason: str | None, job_name: str) -> bool:
        """Whether the trace must be fetched: a node needing messages could still win.

        True when a node with messages has its other conditions met and no node
        without messages earlier in the order already matches.
        """
        for node in self.nodes():
            if not node.has_condition:
                continue
            if node.messages:
                if _others_hold(node, failure_reason, job_name):
                    return True
            elif node.matches(failure_reason, job_name, None):
                return False
        return False

    def max_tail_lines(self) -> int | None:
        """The most trace lines any message node reads (None: the whole trace)."""
        tails = [node.tail_lines for node in self.nodes() if node.messages]
        if not tails or any(tail is None for tail in tails):
            return None
        return max(tail for tail in tails if tail is not None)

    def match(self, failure_reason: str | None, job_name: str, trace: str | None) -> Matcher | None:
        """The first matching node, or None."""
        for node in self.nodes():
            if node.matches(failure_reason, job_name, trace):
                return node
        return None


Outcome = Literal["no_match", "report", "limit_reached", "retry"]


@dataclass(frozen=True)
class Verdict:
    """What the matchers decide for one failed job before GitLab is asked anything
    more: the winning node, the outcome, and for a retry its delay in seconds."""

    node: Matcher | None
    outcome: Outcome
    delay: float = 0.0


def decide(
    config: JobRetryConfig,
    failure_reason: str | None,
    job_name: str,
    trace: str | None,
    attempt: int,
) -> Verdict:
    """The verdict for a job on its `attempt` (its retries so far, 0-based)."""
    node = config.match(failure_reason, job_name, trace)
    if node is None:
        return Verdict(None, "no_match")
    if node.action == "report":
        return Verdict(node, "report")
    if attempt >= node.retry_limit:
        return Verdict(node, "limit_reached")
    return Verdict(node, "retry", node.delay_for(attempt))


def _others_hold(node: Matcher, failure_reason: str | None, job_name: str) -> bool:
    if node.failure_reason and node.failure_reason != failure_reason:
        return False
    return node.job_name is None or node.job_name.search(job_name) is not None


def trace_tail(data: bytes, max_bytes: int) -> str:
    """The last `max_bytes` of a trace as text: a line the cut went through is dropped,
    bytes that are not UTF-8 are replaced."""
    if len(data) <= max_bytes:
        return data.decode("utf-8", errors="replace")
    text = data[-max_bytes:].decode("utf-8", errors="replace")
    if data[-max_bytes - 1] == ord("\n"):  # the cut fell between two lines
        return text
    return text.split("\n", 1)[1] if "\n" in text else ""


def trace_lines(trace: str, tail_lines: int | None = None) -> list[str]:
    """The trace as clean lines (colour codes stripped), only the last `tail_lines`."""
    lines = _ANSI.sub("", trace).replace("\r\n", "\n").split("\n")
    # A carriage return inside a line is a terminal overwrite: the last part is shown.
    lines = [line.rsplit("\r", 1)[-1] for line in lines]
    if lines and lines[-1] == "":
        lines.pop()
    if tail_lines is not None:
        lines = lines[-tail_lines:] if tail_lines > 0 else []
    return lines
