"""The OpenShift tier: `GET {api}/apis/user.openshift.io/v1/users/~` with the caller's token.

The identity is the user's `metadata.name`, its groups the `groups` list; the rules
then make a principal of them. Successful lookups are cached by a SHA-256 hash of the
token (never the token itself) for a TTL (5 minutes by default), so a revoked token
keeps working for at most that long. A token the API refuses (401, 403) is a 401, and
is remembered, by its hash, for a short negative TTL (10 seconds by default) in a cache
of bounded size, so that a client repeating a bad token does not cost a lookup per
request. An API that cannot be reached or answers strangely is a 503, not a 401, so
that clients retry instead of throwing their credentials away; that is never cached.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import httpx

from wq.daemon.auth.core import (
    UNDECIDED,
    AuthenticationFailed,
    AuthenticationUnavailable,
    Principal,
)
from wq.daemon.auth.outbound import bounded_content, describe, exchange_deadline
from wq.daemon.auth.rules import RuleSet

log = logging.getLogger(__name__)

USERS_TILDE = "/apis/user.openshift.io/v1/users/~"
# RFC 6750 b64token, plus `~` as in OpenShift's `sha256~...` tokens.
TOKEN_SHAPE = re.compile(r"[A-Za-z0-9\-._~+/]+=*")

V = TypeVar("V")


class TtlCache(Generic[V]):
    """A thread-safe map whose entries expire after `ttl` seconds of the given clock."""

    def __init__(
        self, ttl: float, max_entries: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.ttl = ttl
        self.max_entries = max_entries
        self.clock = clock
        self._entries: OrderedDict[str, tuple[float, V]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> V | None:
        """The live value of a key, or None (an expired entry is dropped)."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            expires, value = entry
            if self.clock() >= expires:
                del self._entries[key]
                return None
            return value

    def put(self, key: str, value: V) -> None:
        """Store a value; when full, expired entries go first, then the oldest."""
        if self.ttl <= 0:
            return
        with self._lock:
            now = self.clock()
            self._entries.pop(key, None)
            if len(self._entries) >= self.max_entries:
                for stale in [k for k, (expires, _) in self._entries.items() if now >= expires]:
                    del self._entries[stale]
                while len(self._entries) >= self.max_entries:
                    self._entries.popitem(last=False)
            self._entries[key] = (now + self.ttl, value)

    def keys(self) -> list[str]:
        """The cached keys (for tests)."""
        with self._lock:
            return list(self._entries)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)


def token_key(token: str) -> str:
    """The cache key of a token: its SHA-256, so that no token is kept in memory as is."""
    return hashlib.sha256(token.encode()).hexdigest()


class OpenShiftTier:
    """Validates any token through the OpenShift API's `users/~`."""

    name = "ocp-user"

    def __init__(
        self,
        rules: RuleSet,
        *,
        api_url: str,
        client: httpx.Client,
        cache: TtlCache[Principal],
        rejected: TtlCache[str] | None = None,
    ) -> None:
        self.rules = rules
        self.api_url = api_url.rstrip("/")
        self.client = client
        self.cache = cache
        # token hash -> why the API refused it (a message without the token)
        self.rejected: TtlCache[str] = rejected if rejected is not None else TtlCache(0, 1)
        self.lookups = 0  # calls to users/~, for tests and debugging

    def authenticate(self, token: str) -> Principal | None:
        """The principal of a token the OpenShift API knows, or raise."""
        if not TOKEN_SHAPE.fullmatch(token):
            raise AuthenticationFailed("the token is malformed")
        key = token_key(token)
        cached = self.cache.get(key)
        if cached is not None:
            return cached
        refusal = self.rejected.get(key)
        if refusal is not None:
            raise AuthenticationFailed(refusal)
        try:
            identity, groups = self._lookup(token)
        except AuthenticationFailed as err:
            self.rejected.put(key, str(err))
            raise
        principal = self.rules.for_groups(identity, groups, tier=self.name)
        self.cache.put(key, principal)
        return principal

    def known(self, token: str) -> Principal | str:
        """The cached principal of a token; `UNDECIDED` for any other (a lookup, or a
        refusal that `authenticate` words)."""
        if not TOKEN_SHAPE.fullmatch(token):
            return UNDECIDED
        cached = self.cache.get(token_key(token))
        return UNDECIDED if cached is None else cached

    def close(self) -> None:
        """Close the HTTP client."""
        self.client.close()

    def _lookup(self, token: str) -> tuple[str, list[str]]:
        url = self.api_url + USERS_TILDE
        self.lookups += 1
        deadline = exchange_deadline(self.client)
        try:
            with self.client.stream(
                "GET", url, headers={"Authorization": f"Bearer {token}"}
            ) as response:
                status = response.status_code
                content = bounded_content(response, deadline) if status == 200 else b""
        except httpx.HTTPError as err:
            log.warning("OpenShift API at %s: %s", self.api_url, describe(err))
            raise AuthenticationUnavailable(
                f"cannot check the token: the OpenShift API at {self.api_url} is unreachable "
                f"({describe(err)})"
            ) from None
        if status == 401:
            raise AuthenticationFailed("the OpenShift API does not accept the token")
        if status == 403:
            raise AuthenticationFailed(
                "the token may not read its own user (the OpenShift API answered 403)"
            )
        if status != 200:
            log.warning("OpenShift API at %s answered users/~ with HTTP %d", self.api_url, status)
            raise AuthenticationUnavailable(
                f"cannot check the token: the OpenShift API at {self.api_url} answered "
                f"HTTP {status}"
            )
        return self._user_of(content)

    def _user_of(self, content: bytes | None) -> tuple[str, list[str]]:
        try:
            document: Any = None if content is None else json.loads(content)
        except ValueError:
            document = None
        metadata = document.get("metadata") if isinstance(document, dict) else None
        name = metadata.get("name") if isinstance(metadata, dict) else None
        groups = document.get("groups") if isinstance(document, dict) else None
        groups = [] if groups is None else groups
        if (
            not isinstance(name, str)
            or not name
            or not isinstance(groups, list)
            or not all(isinstance(group, str) for group in groups)
        ):
            raise AuthenticationUnavailable(
                f"cannot check the token: unexpected users/~ answer from {self.api_url}"
            )
        return name, groups
