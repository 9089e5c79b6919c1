"""Where the client connects: the server URL and the token from the environment.

Flags win over `WQ_*` variables, which win over the seed's `WORKQUEUE_SERVICE_*`
spellings, which win over the local daemon's default address. A URL names its scheme
(`http://` or `https://`); only a loopback `host:port` (`127.0.0.1:8080`, `localhost:8080`,
`[::1]:8080`) may omit it and means plain HTTP.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from urllib.parse import urlsplit

from wq.client.errors import UsageError
from wq.client.utf8 import is_utf8

DEFAULT_URL = "http://127.0.0.1:8080"
URL_VARIABLES = ("WQ_URL", "WORKQUEUE_SERVICE_URL")
TOKEN_VARIABLES = ("WQ_TOKEN", "WORKQUEUE_SERVICE_TOKEN")


def _first(variables: tuple[str, ...], environ: Mapping[str, str]) -> tuple[str, str] | None:
    for name in variables:
        value = environ.get(name, "").strip()
        if value:
            return name, value
    return None


def resolve_url(flag: str | None, environ: Mapping[str, str] | None = None) -> str:
    """The server URL: `--url`, then the environment, then the local daemon's default.

    An empty `--url` is a usage error; an empty variable counts as unset.
    """
    environ = os.environ if environ is None else environ
    if flag is not None and not flag.strip():
        # Given, but empty (`--url "$UNSET_VARIABLE"`): falling back to another server
        # would act on whichever that is.
        raise UsageError(
            "--url: an empty URL", hint="give the server's URL, or leave --url out for $WQ_URL"
        )
    if flag is not None:
        url, source = flag.strip(), "--url"
    else:
        found = _first(URL_VARIABLES, environ)
        source, url = found if found else ("the default URL", DEFAULT_URL)
    if not is_utf8(url):
        raise UsageError(f"{source}: not valid UTF-8 text")
    url = url.rstrip("/")
    try:
        netloc = urlsplit(url if "://" in url else f"//{url}").netloc
    except ValueError as err:  # `http://[::1`
        raise UsageError(f"{source} {url!r}: not a URL ({err})", hint=_URL_HINT) from None
    if "@" in netloc:
        # Not echoed: what comes before `@` is a password as often as not.
        raise UsageError(
            f"{source}: a user name or password in the URL is not used by wq",
            hint="remove the `user:password@` part: wq authenticates with a token "
            "(wq login, WQ_TOKEN)",
        )
    if "://" not in url:
        # `127.0.0.1:8080` is the local daemon: plain HTTP. Anything else needs its
        # scheme: guessing `https://` made a typo (`--url not-a-url`) a login attempt.
        if not _LOOPBACK_WITH_PORT.match(url):
            raise UsageError(
                f"{source} {url!r}: not a URL",
                hint="give the scheme, as in https://wq.example.com "
                "(only a loopback host:port such as 127.0.0.1:8080 may omit it)",
            )
        url = f"http://{url}"
    import httpx

    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port out of range
        httpx.URL(url)  # what the client will take: `256.1.1.1` is no address
    except (ValueError, httpx.InvalidURL) as err:
        raise UsageError(f"{source} {url!r}: not a URL ({err})", hint=_URL_HINT) from None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise UsageError(
            f"{source} {url!r}: not a URL", hint="use http:// or https:// and a host name"
        )
    if any(char.isspace() for char in parts.netloc):
        raise UsageError(f"{source} {url!r}: not a URL (a space in its host)", hint=_URL_HINT)
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        # The token cache and every request path are keyed on the server's URL alone.
        raise UsageError(
            f"{source} {url!r}: a server's URL has no ?query or #fragment", hint=_URL_HINT
        )
    return url


_URL_HINT = "give the server's URL, as in https://wq.example.com or http://127.0.0.1:8080"

# Loopback addresses with a port: the only URLs that may omit their scheme.
_LOOPBACK_WITH_PORT = re.compile(r"^(127(\.\d{1,3}){3}|localhost|\[::1\]):\d{1,5}(/.*)?$")


def env_token(environ: Mapping[str, str] | None = None) -> tuple[str, str] | None:
    """`(variable, token)` from `WQ_TOKEN` or `WORKQUEUE_SERVICE_TOKEN`, or None."""
    return _first(TOKEN_VARIABLES, os.environ if environ is None else environ)
