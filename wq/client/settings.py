"""Where the client connects: the server URL and the token from the environment.

Flags win over `WQ_*` variables, which win over the seed's `WORKQUEUE_SERVICE_*`
spellings, which win over the local daemon's default address.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

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
    """The server URL: `--url`, then the environment, then the local daemon's default."""
    environ = os.environ if environ is None else environ
    if flag and flag.strip():
        url = flag.strip()
    else:
        found = _first(URL_VARIABLES, environ)
        url = found[1] if found else DEFAULT_URL
    url = url.rstrip("/")
    if "://" not in url:
        # `wq --url host:8080` means plain HTTP only for loopback, HTTPS otherwise.
        local = url.startswith(("127.", "localhost", "[::1]"))
        url = f"{'http' if local else 'https'}://{url}"
    return url


def env_token(environ: Mapping[str, str] | None = None) -> tuple[str, str] | None:
    """`(variable, token)` from `WQ_TOKEN` or `WORKQUEUE_SERVICE_TOKEN`, or None."""
    return _first(TOKEN_VARIABLES, os.environ if environ is None else environ)
