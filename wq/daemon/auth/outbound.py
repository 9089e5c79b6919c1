"""Outbound HTTP for authentication: bounded timeouts, explicit CAs, JSON documents.

Every failure to get a usable answer becomes `AuthenticationUnavailable` (503 to
the caller) with a message that names what was asked and why it failed; tokens
are never part of a message.
"""

from __future__ import annotations

import json
import ssl
import time
from typing import Any

import httpx

import wq
from wq.daemon.auth.core import AuthenticationUnavailable

MAX_DOCUMENT_BYTES = 1 << 20
# The whole of an exchange when the client names no read timeout.
DEFAULT_SECONDS = 10.0


def make_client(*, timeout: float, ca_file: str | None = None) -> httpx.Client:
    """A client that verifies TLS against `ca_file` (or the system's CAs), no redirects."""
    context = ssl.create_default_context(cafile=ca_file)
    return httpx.Client(
        timeout=httpx.Timeout(timeout),
        verify=context,
        follow_redirects=False,
        headers={"User-Agent": f"wq/{wq.__version__}", "Accept": "application/json"},
    )


def describe(err: Exception) -> str:
    """A short reason for a transport error (timeouts and refusals read clearly)."""
    if isinstance(err, httpx.TimeoutException):
        return "timed out"
    if isinstance(err, httpx.ConnectError):
        return f"cannot connect ({err})" if str(err) else "cannot connect"
    return f"{type(err).__name__}: {err}" if str(err) else type(err).__name__


def exchange_deadline(client: httpx.Client) -> float:
    """When an exchange starting now must be over (`time.monotonic()`): within the
    client's timeout, however its answer trickles in."""
    return time.monotonic() + (client.timeout.read or DEFAULT_SECONDS)


def bounded_content(response: httpx.Response, deadline: float) -> bytes | None:
    """The body of a streamed answer, or None past `MAX_DOCUMENT_BYTES` (read no further:
    the length an answer announces is only its sender's word). Past `deadline`
    (`time.monotonic()`), `httpx.ReadTimeout`: a client's timeout bounds each read, and a
    server sending a byte at a time would otherwise hold the caller, and every request
    waiting on the same keys, for as long as it likes."""
    content = bytearray()
    for chunk in response.iter_bytes():
        content += chunk
        if len(content) > MAX_DOCUMENT_BYTES:
            return None
        if time.monotonic() > deadline:
            raise httpx.ReadTimeout("the answer took too long", request=response.request)
    return bytes(content)


def fetch_json(
    client: httpx.Client, url: str, *, what: str, bearer: str | None = None
) -> dict[str, Any]:
    """GET a JSON object, or AuthenticationUnavailable naming `what` and the reason."""
    headers = {"Authorization": f"Bearer {bearer}"} if bearer else None
    deadline = exchange_deadline(client)
    try:
        with client.stream("GET", url, headers=headers) as response:
            if response.status_code != 200:
                raise AuthenticationUnavailable(
                    f"cannot fetch {what} from {url}: HTTP {response.status_code}"
                )
            content = bounded_content(response, deadline)
            if content is None:
                raise AuthenticationUnavailable(f"{what} from {url} is too large")
    except httpx.HTTPError as err:
        raise AuthenticationUnavailable(
            f"cannot fetch {what} from {url}: {describe(err)}"
        ) from None
    try:
        document = json.loads(content)
    except ValueError:
        raise AuthenticationUnavailable(f"{what} from {url} is not JSON") from None
    if not isinstance(document, dict):
        raise AuthenticationUnavailable(f"{what} from {url} is not a JSON object")
    return document
