"""Kerberos login: SPNEGO against the OAuth proxy, then `POST /oauth/token`.

1. `GET {server}/oauth/start` with requests + requests-gssapi, following redirects to
   wherever the proxy sends the browser-less client to authenticate; the proxy sets
   its session cookie.
2. `POST {server}/oauth/token` with that cookie; the answer's `access_token` is the
   Bearer token for the API.

Mutual authentication is `optional` by default: the server's Kerberos answer is
verified whenever one is sent (a forged one fails the login), but the redirect hops
that carry none are accepted, since `required` rejects every such hop. Settings:
`WQ_KERBEROS_MUTUAL` (required, optional, disabled) and `WQ_KERBEROS_OPPORTUNISTIC=1`
(send the first token without waiting for a challenge).

requests-gssapi is the optional extra `wq[kerberos]`; it is imported only here.
"""

from __future__ import annotations

import os
import re
from typing import Any

from wq.client.errors import (
    AuthenticationRequired,
    KerberosUnavailable,
    ServerUnreachable,
    server_message,
)

LOGIN_PATH = "/oauth/start"
TOKEN_PATH = "/oauth/token"
TIMEOUT = 30.0
INSTALL_HINT = (
    "install the extra: pip install 'wq[kerberos]' (gssapi builds against MIT Kerberos: "
    "apt install libkrb5-dev, or dnf install krb5-devel)"
)
KINIT_HINT = "run `kinit` to get a Kerberos ticket, then `wq login`"


def _modules() -> tuple[Any, Any, Any]:
    try:
        import gssapi
        import requests
        import requests_gssapi
    except ImportError as err:
        raise KerberosUnavailable(
            f"Kerberos login is not installed ({err.name} is missing)", hint=INSTALL_HINT
        ) from None
    return gssapi, requests, requests_gssapi


def _ticket(gssapi: Any) -> Any:
    """The default initiator credentials, or a clear error when there is no valid ticket."""
    try:
        credentials = gssapi.Credentials(usage="initiate")
        if credentials.lifetime == 0:
            raise AuthenticationRequired("your Kerberos ticket has expired", hint=KINIT_HINT)
    except gssapi.exceptions.ExpiredCredentialsError:
        raise AuthenticationRequired("your Kerberos ticket has expired", hint=KINIT_HINT) from None
    except gssapi.exceptions.GSSError as err:
        raise AuthenticationRequired(
            f"no Kerberos ticket ({_gss_reason(err)})", hint=KINIT_HINT
        ) from None
    return credentials


def _gss_reason(err: Any) -> str:
    """The specific (minor) part of a GSSAPI message, on one line."""
    message = " ".join(str(err.gen_message()).split())
    minor = re.split(r"Minor \(\d+\): ", message)
    return minor[-1] if len(minor) > 1 else message


def _mutual(requests_gssapi: Any) -> Any:
    value = os.environ.get("WQ_KERBEROS_MUTUAL", "optional").strip().lower()
    choices = {
        "required": requests_gssapi.REQUIRED,
        "optional": requests_gssapi.OPTIONAL,
        "disabled": requests_gssapi.DISABLED,
    }
    if value not in choices:
        raise AuthenticationRequired(
            f"WQ_KERBEROS_MUTUAL={value!r}: expected required, optional or disabled"
        )
    return choices[value]


def spnego_login(server: str, *, timeout: float = TIMEOUT) -> str:
    """Log in to `server` with the user's Kerberos ticket; the Bearer token."""
    gssapi, requests, requests_gssapi = _modules()
    credentials = _ticket(gssapi)
    auth = requests_gssapi.HTTPSPNEGOAuth(
        mutual_authentication=_mutual(requests_gssapi),
        opportunistic_auth=os.environ.get("WQ_KERBEROS_OPPORTUNISTIC", "") == "1",
        creds=credentials,
    )
    login_url, token_url = server + LOGIN_PATH, server + TOKEN_PATH
    with requests.Session() as session:
        try:
            start = session.get(login_url, auth=auth, timeout=timeout, allow_redirects=True)
            if start.status_code == 404:
                raise AuthenticationRequired(
                    f"{login_url} does not exist (HTTP 404): this server has no OAuth login",
                    hint="use the URL of the OAuth proxy in front of wq, or set WQ_TOKEN",
                )
            if start.status_code in (401, 403):
                offered = start.headers.get("WWW-Authenticate", "") or "nothing"
                raise AuthenticationRequired(
                    f"{login_url} refused the Kerberos login (HTTP {start.status_code}, "
                    f"it offers {offered})",
                    hint="check that your ticket's realm is the one the proxy trusts (klist)",
                )
            if start.status_code >= 400:
                raise AuthenticationRequired(
                    f"{login_url} failed: HTTP {start.status_code}",
                )
            exchange = session.post(token_url, timeout=timeout, allow_redirects=False)
        except requests_gssapi.exceptions.MutualAuthenticationError:
            raise AuthenticationRequired(
                f"could not verify the Kerberos identity of {server}",
                hint="the server's answer did not prove its identity; do not trust it",
            ) from None
        except requests.exceptions.ConnectionError as err:
            raise ServerUnreachable(f"cannot connect to {server}: {_reason(err)}") from None
        except requests.exceptions.Timeout:
            raise ServerUnreachable(f"{server} did not answer within {timeout:g}s") from None
        except requests.exceptions.RequestException as err:
            raise AuthenticationRequired(f"Kerberos login at {server} failed: {err}") from None
    return _token_from(exchange, token_url)


def _reason(err: Exception) -> str:
    text = str(err)
    return "connection refused" if "refused" in text.lower() else text


def _token_from(response: Any, token_url: str) -> str:
    try:
        body = response.json()
    except ValueError:
        body = None
    if response.status_code != 200:
        reason = server_message(body, f"HTTP {response.status_code}")
        if 300 <= response.status_code < 400:
            reason = f"redirected to {response.headers.get('Location', '?')}"
        raise AuthenticationRequired(
            f"{token_url} did not accept the login session: {reason}",
            hint="the proxy did not keep the Kerberos session; try `wq login` again",
        )
    token = body.get("access_token") if isinstance(body, dict) else None
    if not isinstance(token, str) or not token:
        raise AuthenticationRequired(f"{token_url} answered without an access_token")
    return token
