"""Failure injection (status, dropped connections, latency) and the request log."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from tests.fakes.gitlab.api import LoggedRequest
from tests.fakes.gitlab.state import GitLabState


@dataclass
class FaultRule:
    """One injected fault or delay, for matching requests, `remaining` times."""

    method: str | None
    pattern: re.Pattern[str]
    remaining: int | None
    status: int | None = None
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    drop: bool = False
    drip: float = 0.0  # > 0: answer 200 and a byte of body each `drip` seconds, for ever

    def matches(self, method: str, path: str) -> bool:
        """Whether the rule applies to this method and raw path."""
        return (self.method in (None, "*", method)) and bool(self.pattern.search(path))


class FaultsMixin(GitLabState):
    """Faults to inject per method and path, and the log of requests."""

    _rules: list[FaultRule]
    requests: list[LoggedRequest]

    def fail_next(
        self,
        method: str | None,
        path: str,
        status: int = 500,
        *,
        times: int | None = 1,
        retry_after: int | None = None,
        body: Any = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        """Answer the next `times` requests (None: all) whose method matches (None or
        "*" for any) and whose percent-encoded path matches the regex `path`
        (re.search) with `status`, before any authentication or state change."""
        extra = dict(headers or {})
        if retry_after is not None:
            extra["Retry-After"] = str(retry_after)
        if status == 429:
            extra.setdefault("Retry-After", "0")
            extra.setdefault("RateLimit-Limit", "600")
            extra.setdefault("RateLimit-Remaining", "0")
        self._add_rule(method, path, times, status=status, body=body, headers=extra)

    def drop_next(self, method: str | None, path: str, *, times: int | None = 1) -> None:
        """Close the connection without answering (a reset / network failure)."""
        self._add_rule(method, path, times, drop=True)

    def drip_next(
        self, method: str | None, path: str, *, every: float, times: int | None = 1
    ) -> None:
        """Answer 200 at once, then send the body a byte every `every` seconds, never
        ending it (a server or proxy that stalls without going quiet)."""
        self._add_rule(method, path, times, drip=every)

    def add_latency(
        self, method: str | None, path: str, seconds: float, *, times: int | None = None
    ) -> None:
        """Delay matching requests by `seconds` (the delay is served outside the lock)."""
        self._add_rule(method, path, times, delay=seconds)

    def clear_faults(self) -> None:
        """Drop every injected fault and delay."""
        with self._lock:
            self._rules.clear()

    def _add_rule(self, method: str | None, path: str, times: int | None, **kwargs: Any) -> None:
        rule = FaultRule(method.upper() if method else None, re.compile(path), times, **kwargs)
        with self._lock:
            self._rules.append(rule)

    def _take_rules(self, method: str, path: str) -> tuple[FaultRule | None, float]:
        fault: FaultRule | None = None
        delay = 0.0
        with self._lock:
            for rule in list(self._rules):
                if not rule.matches(method, path):
                    continue
                is_fault = rule.drop or rule.drip > 0 or rule.status is not None
                if is_fault and fault is not None:
                    continue
                if is_fault:
                    fault = rule
                else:
                    delay += rule.delay
                if rule.remaining is not None:
                    rule.remaining -= 1
                    if rule.remaining <= 0:
                        self._rules.remove(rule)
        return fault, delay

    def requests_to(self, method: str | None = None, path: str = "") -> list[LoggedRequest]:
        """Logged requests matching a method (None: any) and a path regex (re.search)."""
        pattern = re.compile(path)
        with self._lock:
            return [
                entry
                for entry in self.requests
                if (method is None or entry.method == method.upper()) and pattern.search(entry.path)
            ]

    def clear_requests(self) -> None:
        """Forget the logged requests."""
        with self._lock:
            self.requests.clear()
