"""Shell completion of option values: fixed choices here, the rest from the server.

`wq --install-completion` installs the shell's hook; then `wq status --project <TAB>`
asks the server named by `--url` (or `WQ_URL`, or the local daemon) for its projects.
A completion never logs in and never waits long: it uses a token that is already
there (the environment or the cache), gives up after a second, and offers nothing
rather than an error when the server cannot answer.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import typer

from wq.client.vocabulary import ADMISSIONS, PHASES

if TYPE_CHECKING:
    from wq.client.api import ApiClient

# A completion that takes longer than this is worse than none.
TIMEOUT_SECONDS = 1.0
# Recent items whose ids and projects are offered: enough to find the one just
# submitted or seen, little enough to answer at once.
RECENT_ITEMS = 50


def _matching(values: list[str], incomplete: str) -> list[str]:
    return sorted({value for value in values if value.startswith(incomplete)})


def complete_phase(incomplete: str) -> list[str]:
    """The phases an item can be in."""
    return _matching(list(PHASES), incomplete)


def complete_admission(incomplete: str) -> list[str]:
    """The admission states."""
    return _matching(list(ADMISSIONS), incomplete)


@contextlib.contextmanager
def _server(ctx: typer.Context) -> Iterator[ApiClient]:
    """A client for the command's server that never logs in and gives up quickly."""
    from wq.client.api import ApiClient
    from wq.client.credentials import Credentials
    from wq.client.settings import resolve_url

    params = ctx.params
    url = resolve_url(params.get("url"))
    credentials = Credentials(url, no_auth=bool(params.get("no_auth")), login=None)
    with ApiClient(url, credentials=credentials, timeout=TIMEOUT_SECONDS) as api:
        yield api


def _from_server(fetch: Callable[[ApiClient], list[str]]) -> Callable[..., list[str]]:
    def complete(ctx: typer.Context, incomplete: str) -> list[str]:
        try:
            with _server(ctx) as api:
                return _matching(fetch(api), incomplete)
        except Exception:  # no answer is an empty offer, never a traceback
            return []

    return complete


def _recent_items(api: ApiClient) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = api.items_page(limit=RECENT_ITEMS).get("items", [])
    return items


def _projects(api: ApiClient) -> list[str]:
    # The pools name every project with work in flight or queued; recent items add
    # those that are quiet now (an MR waiting for its pipeline holds no slot).
    busy = [str(pool["project"]) for pool in api.pools() if "project" in pool]
    return busy + [str(item["project"]) for item in _recent_items(api) if "project" in item]


def _types(api: ApiClient) -> list[str]:
    return [str(found["type"]) for found in api.submission_types()]


def _kinds(api: ApiClient) -> list[str]:
    return api.task_kinds()


def _recent_ids(api: ApiClient) -> list[str]:
    return [str(item["id"]) for item in _recent_items(api)]


complete_project = _from_server(_projects)
complete_type = _from_server(_types)
complete_kind = _from_server(_kinds)
complete_id = _from_server(_recent_ids)
