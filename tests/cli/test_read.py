"""`wq whoami`, `wq status`, `wq pools`, `wq queue` against a real daemon, every output mode."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from tests.cli.daemon import BLOCKED, PROJECT, RunningDaemon, cli_env, invoke
from tests.support.waiting import wait_for
from wq.cli.common import Output
from wq.cli.items import item_view
from wq.cli.output import emit
from wq.client.api import ApiClient
from wq.client.credentials import Credentials


def env(daemon: RunningDaemon, cache_home: Path, token: str | None = None) -> dict[str, str | None]:
    return cli_env(cache_home, WQ_URL=daemon.url, WQ_TOKEN=token or daemon.admin)


# --------------------------------------------------------------------------- whoami


def test_whoami_prints_only_the_identity(daemon: RunningDaemon, cache_home: Path) -> None:
    result = invoke(["whoami"], env(daemon, cache_home))
    assert result.code == 0, result
    assert result.stdout == "ada\n"
    assert result.stderr == ""


@pytest.mark.parametrize("args", [["--json"], ["-o", "json"], ["-o", "yaml"]])
def test_whoami_machine_formats_are_the_servers_document(
    daemon: RunningDaemon, cache_home: Path, args: list[str]
) -> None:
    result = invoke(["whoami", *args], env(daemon, cache_home))
    assert result.code == 0, result
    document = yaml.safe_load(result.stdout) if "yaml" in args else json.loads(result.stdout)
    with daemon.api() as http:
        assert document == http.get("/api/whoami").json()
    assert document["authentication"]["identity"] == "ada"
    assert document["authorization"]["effective_permissions"]["mr"] == ["read", "retry", "submit"]


def test_whoami_wide_shows_tier_and_permissions(daemon: RunningDaemon, cache_home: Path) -> None:
    result = invoke(["whoami", "-o", "wide"], env(daemon, cache_home, daemon.reader))
    assert result.code == 0, result
    assert "rita" in result.stdout and "ocp-user" in result.stdout
    assert "mr: read" in result.stdout and "readers" in result.stdout


# --------------------------------------------------------------------------- status


def test_status_of_one_item_in_every_mode(daemon: RunningDaemon, cache_home: Path) -> None:
    item = daemon.submit()
    with daemon.api() as http:

        def settled() -> bool:
            current = http.get(f"/api/work-items/{item['id']}").json()
            return bool(current["details"]["mr_url"]) and current["admission"] == "idle"

        wait_for(settled, timeout=30, message="the MR to exist and the item to go idle")
        server = http.get(f"/api/work-items/{item['id']}").json()

    as_json = invoke(["status", "--id", item["id"], "--json"], env(daemon, cache_home))
    assert as_json.code == 0, as_json
    document = as_json.json()
    assert document.pop("queue_position") is None  # not queued
    assert {**document, "updated_at": None} == {**server, "updated_at": None}

    as_yaml = invoke(["status", "--id", item["id"], "-o", "yaml"], env(daemon, cache_home))
    assert yaml.safe_load(as_yaml.stdout)["id"] == item["id"]
    # A list in YAML: it was a traceback (a list of the CLI's own kind, which YAML's safe
    # writer did not know).
    listed = invoke(["status", "--project", PROJECT, "-o", "yaml"], env(daemon, cache_home))
    assert listed.code == 0 and listed.stderr == "", listed
    assert item["id"] in [entry["id"] for entry in yaml.safe_load(listed.stdout)]

    table = invoke(["status", "--id", item["id"]], env(daemon, cache_home))
    assert table.code == 0, table
    for expected in (
        item["id"],
        PROJECT,
        "active",
        "Dimensions",
        "mr_url",
        server["details"]["mr_url"],
    ):
        assert expected in table.stdout, table
    wide = invoke(["status", "--id", item["id"], "-o", "wide"], env(daemon, cache_home))
    assert "IDEMPOTENCY KEY" in wide.stdout and server["idempotency_key"] in wide.stdout


def test_status_of_one_item_says_when_an_item_backing_off_is_taken_again(
    capsys: pytest.CaptureFixture[str],
) -> None:
    soon = (datetime.now(UTC) + timedelta(seconds=90)).isoformat().replace("+00:00", "Z")
    item = {
        "id": "5b1d0c8e-8c55-4a55-9d43-61e0c5d1c7a1",
        "type": "task",
        "project": "demo",
        "phase": "active",
        "admission": "admitted",
        "attempts": 2,
        "error": "start: the run could not start: the cluster is unreachable",
        "run_after": soon,
        "created_at": "2026-12-01T08:00:00Z",
        "updated_at": "2026-12-01T08:00:00Z",
        "details": {},
        "dimensions": [],
    }
    emit(item, Output.table, item_view)
    [line] = [line for line in capsys.readouterr().out.splitlines() if "NOT BEFORE" in line]
    assert f"{soon} (in 1m)" in line
    # Not once that moment has passed, nor for an item that is over.
    an_hour_ago = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    for shown in ({**item, "run_after": an_hour_ago}, {**item, "phase": "failed"}):
        emit(shown, Output.table, item_view)
        assert "NOT BEFORE" not in capsys.readouterr().out


def test_status_shows_the_position_in_the_projects_queue(
    daemon: RunningDaemon, cache_home: Path
) -> None:
    first = daemon.submit(project=BLOCKED)
    second = daemon.submit(project=BLOCKED)
    result = invoke(["status", "--id", second["id"], "--json"], env(daemon, cache_home))
    assert result.code == 0, result
    position = result.json()["queue_position"]
    with daemon.api() as http:
        queue = http.get("/api/queue", params={"project": BLOCKED}).json()
    ids = [entry["id"] for entry in queue]
    assert position["position"] == ids.index(second["id"]) + 1 > ids.index(first["id"]) + 1
    table = invoke(["status", "--id", second["id"]], env(daemon, cache_home))
    assert f"{position['position']} in the normal lane of {BLOCKED}" in table.stdout


def test_status_lists_with_filters_and_follows_the_cursor(
    daemon: RunningDaemon, cache_home: Path
) -> None:
    project = f"{BLOCKED}/list-{daemon.dialect}"
    created = [daemon.submit(project=project)["id"] for _ in range(5)]
    result = invoke(["status", "--project", project, "--json"], env(daemon, cache_home))
    assert result.code == 0, result
    assert [entry["id"] for entry in result.json()] == created[::-1]  # newest first
    limited = invoke(
        ["status", "--project", project, "--limit", "3", "--json"], env(daemon, cache_home)
    )
    assert [entry["id"] for entry in limited.json()] == created[::-1][:3]
    # A table cut by --limit says so (it stopped at 100 in silence); the JSON stays the list.
    cut = invoke(["status", "--project", project, "--limit", "3"], env(daemon, cache_home))
    assert cut.code == 0 and len(cut.stdout.splitlines()) == 4, cut  # the header and 3
    assert cut.stderr == "the newest 3 shown; more match (--limit N, or 0 for all)\n", cut
    whole = invoke(["status", "--project", project, "--limit", "5"], env(daemon, cache_home))
    assert whole.stderr == "" and len(whole.stdout.splitlines()) == 6, whole
    nothing = invoke(
        ["status", "--project", project, "--phase", "failed", "--json"], env(daemon, cache_home)
    )
    queued = invoke(
        ["status", "--project", project, "--admission", "queued", "--json"], env(daemon, cache_home)
    )
    assert len(queued.json()) == 5
    assert nothing.json() == []
    table = invoke(["status", "--project", project, "--type", "mr"], env(daemon, cache_home))
    assert table.code == 0, table
    assert all(item_id in table.stdout for item_id in created)
    empty = invoke(["status", "--project", "group/none"], env(daemon, cache_home))
    # Plain (not a terminal): the header alone on stdout, the note for people on stderr.
    header = ["ID", "TYPE", "PROJECT", "PHASE", "ADMISSION", "ATTEMPTS", "UPDATED"]
    assert empty.code == 0 and empty.stdout.split() == header, empty
    assert empty.stderr == "no items\n", empty


def test_the_client_follows_the_cursor_across_pages(daemon: RunningDaemon) -> None:
    project = f"{BLOCKED}/pages-{daemon.dialect}"
    created = [daemon.submit(project=project)["id"] for _ in range(5)]
    credentials = Credentials(daemon.url, environ={"WQ_TOKEN": daemon.admin})
    with ApiClient(daemon.url, credentials=credentials) as api:
        assert api.items_page(limit=2, project=project)["next_cursor"]
        everything = [e["id"] for e in api.iter_items(limit=None, page_size=2, project=project)]
        three = [e["id"] for e in api.iter_items(limit=3, page_size=2, project=project)]
    assert everything == created[::-1]
    assert three == created[::-1][:3]


# --------------------------------------------------------------------------- pools, queue


def test_pools_and_queue(daemon: RunningDaemon, cache_home: Path) -> None:
    queued = daemon.submit(project=BLOCKED)
    pools = invoke(["pools", "--json"], env(daemon, cache_home))
    assert pools.code == 0, pools
    blocked = next(pool for pool in pools.json() if pool["project"] == BLOCKED)
    assert blocked["capacity"] == 0 and blocked["normal"]["queued"] >= 1
    one = invoke(["pools", "--project", BLOCKED, "-o", "yaml"], env(daemon, cache_home))
    assert yaml.safe_load(one.stdout)[0]["project"] == BLOCKED
    table = invoke(["pools"], env(daemon, cache_home))
    assert BLOCKED in table.stdout and "0/0" in table.stdout
    wide = invoke(["pools", "-o", "wide"], env(daemon, cache_home))
    assert "AUTONOMOUS" in wide.stdout

    queue = invoke(["queue", "--project", BLOCKED, "--json"], env(daemon, cache_home))
    assert queue.code == 0, queue
    entries = queue.json()
    assert entries[-1]["id"] == queued["id"]
    assert [entry["position"] for entry in entries] == list(range(1, len(entries) + 1))
    table = invoke(["queue", "--project", BLOCKED], env(daemon, cache_home))
    assert queued["id"] in table.stdout and "normal" in table.stdout
    empty = invoke(["queue", "--project", PROJECT], env(daemon, cache_home))
    assert empty.code == 0 and empty.stdout.startswith("POSITION"), empty
    assert "nothing queued" not in empty.stdout and empty.stderr == "nothing queued\n", empty


def test_status_of_an_unknown_type_names_the_known_ones(
    daemon: RunningDaemon, cache_home: Path
) -> None:
    result = invoke(["status", "--type", "bogus"], env(daemon, cache_home))
    assert result.code == 2 and result.stdout == "", result
    assert result.stderr.splitlines()[0] == (
        "wq: error: --type: 'bogus' is not a type this server knows (mr)"
    )
    assert result.stderr.splitlines()[1] == "hint: see wq status --help"
    known = invoke(["status", "--type", "mr", "--limit", "1", "--json"], env(daemon, cache_home))
    assert known.code == 0, known


@pytest.mark.parametrize("args", [[], ["-o", "wide"], ["-o", "plain"]])
def test_tables_in_a_pipe_are_plain_lines(
    daemon: RunningDaemon, cache_home: Path, args: list[str]
) -> None:
    project = f"{BLOCKED}/plain-{uuid.uuid4().hex[:8]}"
    created = [daemon.submit(project=project)["id"] for _ in range(2)]
    result = invoke(["status", "--project", project, *args], env(daemon, cache_home))
    assert result.code == 0, result
    header, *rows = result.stdout.splitlines()
    # No rule or blank line, no trailing space: `awk '{print $1}'` gives the ids.
    assert header.split()[:3] == ["ID", "TYPE", "PROJECT"]
    assert [row.split()[0] for row in rows] == created[::-1]
    assert all(line == line.rstrip() and line for line in result.stdout.splitlines())
    pools = invoke(["pools", "--project", project, *args], env(daemon, cache_home))
    assert [line.split()[0] for line in pools.stdout.splitlines()[1:]] == [project], pools


def test_an_id_is_never_folded_on_a_narrow_terminal() -> None:
    """At 80 columns an id is never split over lines: whole when the table has room,
    else its first 8 characters (which every command takes); the list's other words
    (`PROJECT`, `completed`) were cut letter by letter to make room for the whole id."""
    from rich.console import Console

    from wq.cli.output import ItemId, table

    item_id = "008e33c6-e040-4e3c-a7f1-f5f1446f738d"

    def shown(width: int) -> list[str]:
        view = table("ID", "TYPE", "PROJECT", "PHASE", "ADMISSION", "ATTEMPTS", "UPDATED")
        view.add_row(ItemId(item_id), "task", "group/app", "completed", "done", "1", "3m")
        console = Console(width=width, record=True, force_terminal=False)
        console.print(view)
        return console.export_text().splitlines()

    lines = shown(80)
    assert max(len(line) for line in lines) <= 80
    assert lines[0].split() == [
        "ID",
        "TYPE",
        "PROJECT",
        "PHASE",
        "ADMISSION",
        "ATTEMPTS",
        "UPDATED",
    ]
    assert lines[2].split() == ["008e33c6", "task", "group/app", "completed", "done", "1", "3m"]
    wide = shown(120)
    assert wide[2].split()[0] == item_id, wide
