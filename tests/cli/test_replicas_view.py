"""`wq replicas` and the TUI's replicas table: a lost replica's workers and leases."""

from __future__ import annotations

from tests.tui.canned import replica
from wq.cli.output import plain_text
from wq.cli.replicas import replicas_view
from wq.tui.overview import replica_rows


def test_a_lost_replica_shows_the_leases_it_still_holds_not_its_last_report() -> None:
    # Its last heartbeat said 3 workers busy and 3 leases; the others have since taken
    # over all but one of its items.
    replicas = [replica(1), replica(2, state="lost", being_rescued=1)]
    header, alive, lost = plain_text(replicas_view(replicas, False)).splitlines()

    def cell(line: str, column: str) -> str:
        return line[header.index(column) :].split("  ")[0].strip()

    assert [cell(alive, "WORKERS"), cell(alive, "LEASES")] == ["3/10", "3"]
    assert [cell(lost, "STATE"), cell(lost, "WORKERS"), cell(lost, "LEASES")] == [
        "lost (1 being rescued)",
        "-",
        "1",
    ]
    rows = dict(replica_rows(replicas))
    assert rows["wq-1:1"][3:5] == ["3/10", "3"]
    assert rows["wq-2:1"][3:5] == ["-", "1"]


def test_a_lost_replica_has_no_uptime() -> None:
    # It stopped with its last heartbeat: counting on from its start would say it is up.
    replicas = [replica(1), replica(2, state="lost")]
    header, alive, lost = plain_text(replicas_view(replicas, False)).splitlines()
    up = header.index("UP")
    assert alive[up:].strip() not in ("", "-")
    assert lost[up:].strip() == "-"
