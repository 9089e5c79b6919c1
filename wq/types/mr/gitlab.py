"""GitLab access for MR executors: python-gitlab clients and error classification.

5xx, timeouts, connection errors, 429 (honouring Retry-After) and answers that are not
JSON are transient and retried with backoff; 401, 403 and 404 are permanent and end up
on the item as a readable error. Tokens never appear in messages.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import gitlab
import requests
from gitlab.exceptions import GitlabError, GitlabParsingError

from wq.engine.registry import PermanentFailure, RetryLater
from wq.types.mr.call_deadline import CallTimeout, DeadlineSession
from wq.types.mr.settings import MrSettings

TRANSIENT_CODES = frozenset({408, 429, 500, 502, 503, 504})


_seen = threading.local()  # the Retry-After of this thread's last 429 answer
# The tokens this process has sent: an answer quoting one (a proxy echoing the request's
# headers) has it cut from the error kept in the item, its audit rows and the log.
_sent_tokens: set[str] = set()


def _remember_retry_after(response: requests.Response, *_: Any, **__: Any) -> None:
    if response.status_code == 429:
        _seen.retry_after = response.headers.get("Retry-After")


class _Gitlab(gitlab.Gitlab):
    """python-gitlab that reports a 429 instead of sleeping in the worker.

    The engine then retries the action after the server's Retry-After, which
    python-gitlab's errors do not carry, so a response hook keeps it.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.session.hooks["response"].append(_remember_retry_after)

    def http_request(self, *args: Any, **kwargs: Any) -> requests.Response:
        kwargs["obey_rate_limit"] = False
        return super().http_request(*args, **kwargs)


def client(settings: MrSettings, project: str) -> gitlab.Gitlab:
    """A python-gitlab client with the project's token."""
    try:
        url, token = settings.gitlab_for(project)
    except LookupError as err:
        raise PermanentFailure(str(err)) from None
    _sent_tokens.add(token)
    return _Gitlab(
        url,
        private_token=token,
        timeout=settings.request_timeout_seconds,
        retry_transient_errors=False,
        session=DeadlineSession(settings.request_timeout_seconds),
    )


def retry_after_seen() -> float | None:
    """The Retry-After (seconds) of this thread's last 429 answer, once; None without."""
    value = getattr(_seen, "retry_after", None)
    _seen.retry_after = None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None  # an HTTP date: the backoff is used instead


def is_transient(err: BaseException) -> bool:
    """True for errors worth retrying later.

    An answer that is not JSON is one: a proxy's page in GitLab's place (maintenance,
    a login portal) says nothing of the request, which is tried again.
    """
    if isinstance(err, requests.exceptions.ConnectionError | requests.exceptions.Timeout):
        return True
    if isinstance(err, GitlabParsingError):
        return True
    return isinstance(err, GitlabError) and err.response_code in TRANSIENT_CODES


def describe(err: BaseException) -> str:
    """A readable one-line account of a GitLab error, without any token it quotes."""
    if isinstance(err, CallTimeout):
        return f"cannot reach GitLab: {err}"
    if not isinstance(err, GitlabError):
        return f"cannot reach GitLab: {type(err).__name__}"
    if isinstance(err, GitlabParsingError):
        return "GitLab's answer could not be read (not JSON)"
    said = f"GitLab answered {err.response_code}: {err.error_message}"
    for token in tuple(_sent_tokens):  # a copy: workers add theirs meanwhile
        # In any case: an echo in capitals would still give most of the token away.
        said = re.sub(re.escape(token), "[token]", said, flags=re.IGNORECASE)
    return said


@contextmanager
def translated(*, keep_trying: bool = False) -> Iterator[None]:
    """Turn GitLab and network errors into the engine's retry/fail exceptions.

    `keep_trying`: transient errors never fail the item (a periodic look after an open
    MR, which a GitLab outage must not end).
    """
    try:
        yield
    except (GitlabError, requests.exceptions.RequestException) as err:
        message = describe(err)
        if is_transient(err):
            retry_after = retry_after_seen() if isinstance(err, GitlabError) else None
            raise RetryLater(message, retry_after=retry_after, keep_trying=keep_trying) from None
        raise PermanentFailure(message) from None


def title_for(title: str, draft: bool) -> str:
    """GitLab marks drafts through the title prefix."""
    return f"Draft: {title}" if draft else title


def is_draft_title(title: str) -> bool:
    """Whether GitLab considers a title a draft."""
    lowered = title.lower()
    return lowered.startswith(("draft:", "[draft]", "(draft)"))
