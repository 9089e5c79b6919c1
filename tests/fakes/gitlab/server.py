"""The fake GitLab server: HTTP entry point, routing, authentication, shared JSON bits.

It runs on the shared loopback listener (tests/fakes/loopback.py) and puts together the API
areas, each a mixin in its own module; see the package docstring for what it models.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote, urlencode, urlsplit

from tests.fakes.gitlab.api import (
    INJECTED_BODIES,
    ROUTES,
    SECRET_HEADERS,
    ApiError,
    Ctx,
    LoggedRequest,
    Response,
    match_route,
    message_error,
    not_found,
    parse_body,
    parse_query,
)
from tests.fakes.gitlab.branches import BranchesMixin
from tests.fakes.gitlab.ci import CiMixin
from tests.fakes.gitlab.commits import CommitsMixin
from tests.fakes.gitlab.controls import ControlsMixin
from tests.fakes.gitlab.faults import FaultRule, FaultsMixin
from tests.fakes.gitlab.files import FilesMixin
from tests.fakes.gitlab.merge_requests import MergeRequestsMixin
from tests.fakes.gitlab.mr_lifecycle import MergeRequestLifecycle
from tests.fakes.gitlab.notes import NotesMixin
from tests.fakes.gitlab.projects import ProjectsMixin
from tests.fakes.gitlab.repository import RepositoryMixin
from tests.fakes.gitlab.state import GitLabState, Project, Token, User
from tests.fakes.loopback import Answer, LoopbackListener

API_PREFIX = "/api/v4/"


class FakeGitLab(
    ControlsMixin,
    FaultsMixin,
    RepositoryMixin,
    BranchesMixin,
    FilesMixin,
    CommitsMixin,
    MergeRequestLifecycle,
    MergeRequestsMixin,
    NotesMixin,
    CiMixin,
    ProjectsMixin,
    GitLabState,
):
    """The fake GitLab server and its in-memory state (see the package docstring)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__()
        self.requests: list[LoggedRequest] = []
        self._rules: list[FaultRule] = []
        # HTTP/1.1 keep-alive as GitLab's nginx does; python-gitlab reuses connections.
        self._listener = LoopbackListener(
            self._serve,
            name="fake-gitlab",
            host=host,
            port=port,
            protocol="HTTP/1.1",
            server_version="nginx",
        )

    # ----------------------------------------------------------------- lifecycle

    def start(self) -> FakeGitLab:
        """Listen on the loopback address (an ephemeral port unless one was given)."""
        self._listener.start()
        return self

    def stop(self) -> None:
        """Stop serving and cut open connections; `start()` again reuses the same port."""
        self._listener.stop()

    def __enter__(self) -> FakeGitLab:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """The base URL to give python-gitlab, e.g. ``http://127.0.0.1:41234``."""
        if not self._listener.port:
            raise RuntimeError("FakeGitLab is not started")
        return self._listener.url()

    # ----------------------------------------------------------------- HTTP entry point

    def _serve(
        self, method: str, target: str, headers: dict[str, str], body: bytes
    ) -> Answer | None:
        """The listener's callback: encode `handle`'s answer as GitLab would send it."""
        response = self.handle(method, target, headers, body)
        if response is None:
            return None
        status, payload, extra = response
        if isinstance(payload, Iterator):
            return status, {"Content-Type": "application/json", **extra}, payload
        if isinstance(payload, bytes):
            data, content_type = payload, "application/octet-stream"
        elif isinstance(payload, str):
            data, content_type = payload.encode(), "text/plain; charset=utf-8"
        else:
            data, content_type = json.dumps(payload).encode(), "application/json"
        return status, {"Content-Type": content_type, **extra}, data

    def handle(
        self, method: str, target: str, headers: dict[str, str], body: bytes
    ) -> Response | None:
        """Answer one request: (status, body, headers), or None to drop the connection."""
        split = urlsplit(target)
        raw_path = split.path
        query = parse_query(split.query)
        lowered = {key.lower(): value for key, value in headers.items()}
        logged = {
            key: ("[redacted]" if key.lower() in SECRET_HEADERS else value)
            for key, value in headers.items()
        }
        entry = LoggedRequest(method, raw_path, query, None, logged)
        with self._lock:
            self.requests.append(entry)
        fault, delay = self._take_rules(method, raw_path)
        if delay:
            time.sleep(delay)
        try:
            entry.json = parse_body(lowered.get("content-type", ""), body)
        except ApiError as err:
            entry.status = err.status
            return err.status, err.body, err.headers
        if fault is not None:
            entry.injected = True
            if fault.drop:
                entry.status = 0
                return None
            if fault.drip:
                entry.status = 200
                return 200, _dripping(fault.drip), {}
            assert fault.status is not None
            payload = fault.body if fault.body is not None else INJECTED_BODIES.get(fault.status)
            entry.status = fault.status
            return fault.status, payload, dict(fault.headers)
        with self._lock:
            try:
                response = self._dispatch(method, raw_path, query, lowered, entry.json)
            except ApiError as err:
                response = (err.status, err.body, err.headers)
        entry.status = response[0]
        return response

    def _dispatch(
        self,
        method: str,
        raw_path: str,
        query: dict[str, Any],
        headers: dict[str, str],
        body: Any,
    ) -> Response:
        if not raw_path.startswith(API_PREFIX):
            raise ApiError(404, {"error": "404 Not Found"})
        segments = [unquote(part) for part in raw_path[len(API_PREFIX) :].split("/")]
        if segments and segments[-1] == "":
            segments.pop()
        candidates = [
            (route_method, handler, args)
            for route_method, pattern, handler in ROUTES
            if (args := match_route(pattern, segments)) is not None
        ]
        if not candidates:
            raise ApiError(404, {"error": "404 Not Found"})
        wanted = [method, "GET"] if method == "HEAD" else [method]
        chosen = next(
            ((handler, args) for want in wanted for m, handler, args in candidates if m == want),
            None,
        )
        if chosen is None:
            raise ApiError(405, {"error": "405 Not Allowed"})
        handler, args = chosen

        token = self._authenticate(headers, query)
        params = {key: value for key, value in query.items() if key != "private_token"}
        if isinstance(body, dict):
            params.update(body)
        ctx = Ctx(method, raw_path, query, params, token, args)
        if "project" in args:
            project = self._find_project(args["project"])
            if project is None or not token.can_see(project):
                raise not_found("Project")
            ctx.project = project
            if method not in ("GET", "HEAD") and token.access != "write":
                raise message_error(403, "403 Forbidden")
        return handler(self, ctx)

    def _authenticate(self, headers: dict[str, str], query: dict[str, Any]) -> Token:
        value = headers.get("private-token") or query.get("private_token")
        authorization = headers.get("authorization", "")
        if not value and authorization.lower().startswith("bearer "):
            value = authorization[7:].strip()
        token = self.tokens.get(value) if isinstance(value, str) else None
        if token is None:
            raise message_error(401, "401 Unauthorized")
        return token

    # ----------------------------------------------------------------- shared JSON

    def _web(self, project: Project) -> str:
        return f"{self.url}/{project.path}"

    def _user_json(self, user: User | None) -> dict[str, Any] | None:
        if user is None:
            return None
        return {
            "id": user.id,
            "username": user.username,
            "name": user.name,
            "state": "active",
            "locked": False,
            "avatar_url": None,
            "web_url": f"{self.url}/{user.username}",
        }

    def _paginate(self, ctx: Ctx, items: list[Any]) -> Response:
        per_page = ctx.integer("per_page", 20) or 20
        per_page = max(1, min(per_page, 100))
        page = max(1, ctx.integer("page", 1) or 1)
        total = len(items)
        pages = max(1, -(-total // per_page))
        chunk = items[(page - 1) * per_page : page * per_page]
        keep = [
            (key, value)
            for key, values in ctx.query.items()
            if key not in ("page", "per_page", "private_token")
            for value in (values if isinstance(values, list) else [values])
        ]
        key_names = {
            key: f"{key}[]" for key, values in ctx.query.items() if isinstance(values, list)
        }
        keep = [(key_names.get(key, key), value) for key, value in keep]

        def link(number: int) -> str:
            query = urlencode([*keep, ("page", number), ("per_page", per_page)])
            return f"{self.url}{ctx.raw_path}?{query}"

        links = []
        if page < pages:
            links.append(f'<{link(page + 1)}>; rel="next"')
        if page > 1:
            links.append(f'<{link(page - 1)}>; rel="prev"')
        links.append(f'<{link(1)}>; rel="first"')
        links.append(f'<{link(pages)}>; rel="last"')
        headers = {
            "X-Page": str(page),
            "X-Per-Page": str(per_page),
            "X-Total": str(total),
            "X-Total-Pages": str(pages),
            "X-Next-Page": str(page + 1) if page < pages else "",
            "X-Prev-Page": str(page - 1) if page > 1 else "",
            "Link": ", ".join(links),
        }
        return 200, chunk, headers


def _dripping(every: float) -> Iterator[bytes]:
    """A body that never ends: a space every `every` seconds (until the client leaves)."""
    while True:
        yield b" "
        time.sleep(every)
