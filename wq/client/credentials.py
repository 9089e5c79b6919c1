"""Which Bearer token a request carries, in the seed's order.

1. `WQ_TOKEN` (or `WORKQUEUE_SERVICE_TOKEN`): used as given, never replaced.
2. The token cached for this server (a login's, or the local daemon's own token).
3. A login (Kerberos/SPNEGO through the OAuth proxy), whose token is then cached;
   a server that cannot be reached is reported as such first, not as a failed login.
4. Nothing left: `AuthenticationRequired`, which says how to log in (exit 4).

A rejected (401) cached token is dropped and replaced once, by a token another process
cached meanwhile or by a fresh login; a token that came from a login and is rejected
is never followed by another login, so a misconfigured server cannot cause a loop.
Thread-safe: the TUI calls it from worker threads.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from wq.client.errors import AuthenticationRequired
from wq.client.settings import env_token
from wq.client.token_cache import TokenCache, loopback_alias

Login = Callable[[str], str]
"""A login: takes the server URL, returns a Bearer token or raises `AuthenticationRequired`."""

LOGIN_HINT = "run `kinit` and `wq login`, or set WQ_TOKEN"

# A Bearer token travels in an HTTP header as it is: printable ASCII without spaces.
# A line break pasted along or a non-ASCII letter cannot even be sent: said as such,
# not as the network error or traceback sending it would end in.
_TOKEN_CHARACTERS = re.compile(r"[\x21-\x7e]+")


def _refuse_malformed(value: str, what: str, *, hint: str) -> None:
    """Raise `AuthenticationRequired` naming `what` unless `value` can be a token."""
    if not _TOKEN_CHARACTERS.fullmatch(value):
        raise AuthenticationRequired(
            f"{what} is malformed: it holds characters a token cannot have", hint=hint
        )


@dataclass(frozen=True)
class Token:
    """A Bearer token and where it came from."""

    value: str
    source: Literal["env", "cache", "login"]
    variable: str | None = None  # the environment variable, for `env`


def default_login(server: str) -> str:
    """The Kerberos login (imported only when a login really happens)."""
    from wq.client.kerberos import spnego_login

    return spnego_login(server)


class Credentials:
    """Resolves and refreshes the token for one server (see the module docstring)."""

    def __init__(
        self,
        server: str,
        *,
        no_auth: bool = False,
        environ: Mapping[str, str] | None = None,
        cache: TokenCache | None = None,
        login: Login | None = default_login,
        before_login: Callable[[], None] | None = None,
    ) -> None:
        self.server = server
        # Raises when a login is pointless: the server cannot be reached at all.
        self._before_login = before_login
        self.no_auth = no_auth
        self._environ = os.environ if environ is None else environ
        self._cache = cache
        self._login = login
        self._token: Token | None = None
        self._lock = threading.Lock()
        self.logins = 0  # how many logins this object ran (tests and diagnostics)
        self._login_rejected = False  # a login's token was refused: never log in again

    @property
    def cache(self) -> TokenCache:
        """The token cache (created on first use, so the environment is read late)."""
        if self._cache is None:
            self._cache = TokenCache()
        return self._cache

    def current(self) -> Token | None:
        """The token to send now (None with `--no-auth`); may log in."""
        if self.no_auth:
            return None
        with self._lock:
            if self._token is None:
                self._token = self._resolve()
            return self._token

    def _resolve(self) -> Token:
        found = env_token(self._environ)
        if found is not None:
            variable, value = found
            _refuse_malformed(
                value,
                f"the token in {variable}",
                hint=f"check {variable}: a token is printable ASCII, without spaces",
            )
            return Token(value, "env", variable)
        unsafe = self.cache.unsafe()
        if unsafe is not None:
            # No login either: its token would be written where others can reach it.
            untrusted, remedy = unsafe
            raise AuthenticationRequired(
                f"{untrusted}: no token in it is used", hint=f"{remedy} (or set WQ_TOKEN)"
            )
        cached = self._cached()
        if cached is not None:
            return cached
        reason = f"not logged in to {self.server}"
        hint = LOGIN_HINT
        problem = self.cache.problem(self.server)
        if problem is not None:
            # A login replaces the file; if none can, the file is what to see to.
            path = self.cache.path_for(self.server)
            reason = f"the cached token for {self.server} cannot be used: {path} {problem}"
            hint = f"delete {path}, then run `wq login` (or set WQ_TOKEN)"
        try:
            return self._login_now(reason=reason, hint=hint)
        except AuthenticationRequired as err:
            if self._login is None:
                raise
            # The automatic login failed: say first that there was no token at all.
            raise AuthenticationRequired(
                f"{reason}, and logging in failed: {err.message}",
                hint=hint if problem is not None else err.hint or LOGIN_HINT,
            ) from None

    def _cached(self) -> Token | None:
        """The valid token cached for this server, if any; refused when malformed.

        A cache file edited by hand (or written by something else) may hold what no
        token has: said as such, naming the file, not sent.
        """
        server = self.server
        cached = self.cache.load(server)
        if cached is None:
            if self.cache.path_for(server).exists():
                # A login of this spelling, expired or spoilt: said as such (or renewed),
                # never quietly replaced by the local daemon's token.
                return None
            # The local daemon writes its token under the address it listens on
            # (127.0.0.1); `localhost` is the same daemon to whoever types it.
            server = loopback_alias(server) or server
            cached = self.cache.load(server)
            if cached is None or not cached.local:
                return None
        path = self.cache.path_for(server)
        _refuse_malformed(
            cached.token,
            f"the cached token for {server} ({path})",
            hint=f"run `wq login` again, or delete {path}",
        )
        return Token(cached.token, "cache")

    def _login_now(self, *, reason: str, hint: str = LOGIN_HINT) -> Token:
        if self._login is None:
            raise AuthenticationRequired(reason, hint=hint)
        if self._login_rejected:
            raise AuthenticationRequired(
                f"{self.server} rejected the token its own login returned",
                hint="check the server's authentication settings",
            )
        if self._before_login is not None:
            self._before_login()
        self.logins += 1
        value = self._login(self.server)
        self.cache.store(self.server, value)
        return Token(value, "login")

    def login(self) -> Token:
        """Log in now (for `wq login`), replacing any cached token."""
        with self._lock:
            self._token = self._login_now(reason=f"no login method for {self.server}")
            return self._token

    def discard(self, token: Token) -> None:
        """The server answered 401 to the retry as well: drop `token`, ask for no other."""
        if token.source == "env":
            return
        with self._lock:
            self.cache.forget(self.server, token=token.value)
            if self._token == token:
                self._token = None
            if token.source == "login":
                self._login_rejected = True

    def rejected(self, token: Token) -> Token | None:
        """The server answered 401 to `token`: a replacement to retry once with, or None."""
        if token.source == "env":
            return None
        with self._lock:
            if self._token is not None and self._token != token:
                return self._token  # another thread already replaced it
            self.cache.forget(self.server, token=token.value)
            if token.source == "login":
                self._token = None
                self._login_rejected = True
                return None
            cached = self._cached()
            if cached is not None and cached.value != token.value:
                self._token = cached
            else:
                self._token = self._login_now(
                    reason=f"the cached token for {self.server} was rejected"
                )
            return self._token
