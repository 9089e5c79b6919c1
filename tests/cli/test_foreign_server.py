"""`--url` pointing at something that is not a wq server: one error line, exit 1.

Another service answering JSON of another shape (an object, a list, null, a string,
nothing) or a web page with 200 must never make a command crash with a traceback, print
a wrong table, or exit 0 with nothing: the client checks every answer's shape and says
what was unexpected, naming the server.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.daemon import Result, base_env, cli_env, invoke, run
from tests.fakes.foreign import ANSWERS, ForeignServer

ITEM = str(uuid.UUID(int=1))
COMMANDS = [
    ["status"],
    ["status", "-o", "json"],
    ["status", "--id", ITEM],
    ["pools"],
    ["pools", "-o", "json"],
    ["pools", "--project", "team/app"],
    ["queue", "--project", "team/app"],
    ["whoami"],
    ["whoami", "-o", "yaml"],
    ["submit"],
    ["submit", "task", "--project", "team/app", "--kind", "echo"],
    ["retry", "--id", ITEM],
    ["cancel", ITEM],
]


@pytest.fixture(scope="module", params=sorted(ANSWERS))
def foreign(request: pytest.FixtureRequest) -> Iterator[ForeignServer]:
    with ForeignServer(request.param) as server:
        yield server


def assert_unexpected(result: Result, url: str, command: str) -> None:
    assert result.code == 1, result
    assert result.stdout == "", result
    assert "Traceback" not in result.stderr, result
    lines = result.stderr.splitlines()
    assert all(line.startswith("wq: error: ") for line in lines), result
    assert len(lines) == 1, result  # one id that failed: one line (see test_errors)
    assert f"unexpected answer from {url}: " in lines[0], result
    assert "is this a wq server?" in lines[0], result


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_a_foreign_answer_is_one_error_line_and_exit_1(
    foreign: ForeignServer, args: list[str], tmp_path: Path
) -> None:
    result = invoke([*args, "--url", foreign.url], cli_env(tmp_path, WQ_TOKEN="t"))
    assert_unexpected(result, foreign.url, args[0])


def test_the_error_says_what_was_unexpected(tmp_path: Path) -> None:
    env = cli_env(tmp_path, WQ_TOKEN="t")
    with ForeignServer("object") as server:
        pools = invoke(["pools", "--url", server.url], env)
        whoami = invoke(["whoami", "--url", server.url], env)
    assert "GET /api/pools: expected a list, got an object" in pools.stderr, pools
    assert "GET /api/whoami: authentication: missing" in whoami.stderr, whoami
    with ForeignServer("html") as server:
        page = invoke(["status", "--url", server.url], env)
    assert "GET /api/work-items: not JSON (text/html; " in page.stderr, page


def test_a_wq_like_answer_with_a_wrong_field_names_the_field(tmp_path: Path) -> None:
    pool = {
        "project": "team/app",
        "capacity": 4,
        "alert_capacity": 1,
        "queued_autonomous_cap": 6,
        "normal": {"capacity": 4, "in_flight": "2", "queued": 0},
        "alert": {"capacity": 1, "in_flight": 0, "queued": 0},
        "queued_autonomous": 0,
        "oldest_queued_at": None,
        "oldest_queued_age_seconds": None,
    }
    with ForeignServer(document=[pool]) as server:
        result = invoke(["pools", "--url", server.url], cli_env(tmp_path, WQ_TOKEN="t"))
    assert_unexpected(result, server.url, "pools")
    assert "0.normal.in_flight: expected an integer, got a string" in result.stderr


def test_a_long_wrong_list_is_judged_by_its_first_wrong_entry(tmp_path: Path) -> None:
    # Every wrong entry of 100,000 made a set of errors of its own: 2 GB of memory for an
    # answer of 1 MB (and the OOM killer for 30 MB), to say "(and 2099999 more)".
    page = {"items": [{"id": "x"}] * 100_000, "next_cursor": None}
    with ForeignServer(document=page) as server:
        result = invoke(["status", "--url", server.url], cli_env(tmp_path, WQ_TOKEN="t"))
    assert_unexpected(result, server.url, "status")
    assert "GET /api/work-items: items.0.type: missing (and 20 more)" in result.stderr, result


def test_a_real_process_exits_1_without_traceback(tmp_path: Path) -> None:
    with ForeignServer("list") as server:
        result = run(["pools", "--url", server.url], base_env(tmp_path, WQ_TOKEN="t"), tmp_path)
    assert_unexpected(result, server.url, "pools")


def test_a_retry_answered_with_only_id_and_phase_is_printed(tmp_path: Path) -> None:
    # What the API answers a caller with `retry` but without `read` on the item's type.
    with ForeignServer(document={"id": ITEM, "phase": "active"}) as server:
        result = invoke(["retry", ITEM, "--url", server.url], cli_env(tmp_path, WQ_TOKEN="t"))
    assert result.code == 0, result
    assert result.stdout == f"retried {ITEM}: active\n", result


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_a_redirect_is_not_a_wq_api(args: list[str], tmp_path: Path) -> None:
    # A proxy's login page or a web site redirects; the wq API never does.
    with ForeignServer(redirect="https://sso.example.com/login?next=/") as server:
        result = invoke([*args, "--url", server.url], cli_env(tmp_path, WQ_TOKEN="t"))
    assert result.code == 1 and result.stdout == "", result
    first, *rest = result.stderr.splitlines()
    assert first.startswith(f"wq: error: not a wq API at this URL: {server.url} answered "), result
    assert "with a redirect (307 to https://sso.example.com/login?next=/)" in first, result
    assert rest == ["hint: check --url (or WQ_URL): it names the wq server itself"], result


@pytest.fixture(scope="module")
def web_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`python3 -m http.server`: answers a path it has not with a 404 page, and a POST
    with a 501 page."""
    import functools
    import threading
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *_: object) -> None:  # not into the CLI's stderr
            pass

    served = tmp_path_factory.mktemp("site")
    handler = functools.partial(Quiet, directory=str(served))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(
    "args",
    [["status", "--id", ITEM], ["pools"], ["submit", "task", "--project", "a", "--kind", "e"]],
    ids=" ".join,
)
def test_a_web_server_is_not_a_wq_api(web_server: str, args: list[str], tmp_path: Path) -> None:
    """Its 404 page read as `not found: HTTP 404` (exit 3: as if the item did not
    exist), its 501 page as a server error."""
    result = invoke([*args, "--url", web_server], cli_env(tmp_path, WQ_TOKEN="t"))
    assert result.code == 1 and result.stdout == "", result
    first, *rest = result.stderr.splitlines()
    assert first.startswith(f"wq: error: not a wq API at this URL: {web_server} answered "), result
    assert "not wq's JSON error" in first and "(text/html" in first, result
    assert rest == ["hint: check --url (or WQ_URL): it names the wq server itself"], result
