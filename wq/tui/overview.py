"""The Overview, the first view: is it healthy, and if not, where to look.

Throughput and failures of the last hour, a bar per minute; each lane's queue now;
what needs attention (failures, items backing off, full pools with a queue, events
waiting, lost replicas), each row leading with enter to the view that explains it;
then the replicas.
"""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.widgets import DataTable, Header, Label, Sparkline, Static

from wq.client.errors import NotFound
from wq.client.pressure import pressure
from wq.client.shown import counted, workers_and_leases
from wq.tui.footer import FittingFooter
from wq.tui.format import age, short_middle
from wq.tui.polling import PollingScreen
from wq.tui.status import StatusLine
from wq.tui.table import RowTable, fill, selected_key
from wq.tui.widths import give_way, room, widest

SERIES = (("created", "created"), ("completed", "done"), ("failed", "failed"))
WINDOW, STEP = "1h", "1m"
# Full pools listed at most: the rest are one row away in Pools.
MAX_FULL_POOLS = 5
# A project cut to fit "needs attention" keeps at least this much of its name, and the
# column at least this much of its rows.
MIN_PROJECT = 12
MIN_WHAT = 30


def _is_full(pool: dict[str, Any]) -> bool:
    normal = pool["normal"]
    return bool(normal["queued"]) and normal["in_flight"] >= normal["capacity"]


def now_line(stats: dict[str, Any], pools: list[dict[str, Any]]) -> str:
    """Running and queued work across every project, and the oldest wait per lane."""
    running = sum(pool["normal"]["in_flight"] + pool["alert"]["in_flight"] for pool in pools)
    lanes = [
        f"{lane['lane']} {lane['depth']} queued"
        + (f" (oldest {age(lane.get('oldest_wait_seconds'))})" if lane["depth"] else "")
        for lane in stats["lanes"]
    ]
    projects = f"{counted(len(pools), 'project')} with work"
    return f"{running} running · {' · '.join(lanes)} · {projects}"


def attention(
    stats: dict[str, Any],
    pools: list[dict[str, Any]],
    replicas: list[dict[str, Any]],
    what_width: int | None = None,
) -> list[tuple[str, list[str]]]:
    """The rows of "needs attention": (where enter leads, [what, detail]).

    Each row's key is its own (`kind:what`, the kind saying where enter leads): a
    table's rows need keys of their own, and two lost replicas are two rows. With
    `what_width`, a full pool's project is cut in the middle so that its row's `what`
    fits it (what follows the name, and the detail, stay whole).
    """
    rows: list[tuple[str, list[str]]] = []
    for replica in replicas:
        if replica["state"] == "lost":
            rescued = replica["being_rescued"]
            rows.append(
                (
                    f"replicas:{replica['id']}",
                    [
                        f"replica {replica['id']} lost",
                        f"no heartbeat for {age(replica['heartbeat_age_seconds'])}"
                        + (f", {counted(rescued, 'item')} being rescued" if rescued else ""),
                    ],
                )
            )
    failed = sum(bucket["failed"] for bucket in stats["buckets"])
    if failed:
        # Failures, not items: an item retried and failed again counts twice.
        said = f"{counted(failed, 'failure')} in the last hour"
        rows.append(("items:failed", [said, "enter: the failed items"]))
    backing_off = sum(pool.get("backing_off", 0) for pool in pools)
    if backing_off:
        rows.append(
            (
                "pools:backing-off",
                [f"{counted(backing_off, 'item')} backing off", "after failed tries; enter: Pools"],
            )
        )
    pending = stats.get("pending_events", 0)
    if pending:
        rows.append(("items:active", [f"{pending} events waiting", "stored, not applied yet"]))
    for lane in stats["lanes"]:
        if lane["depth"]:
            waited = age(lane.get("oldest_wait_seconds"))
            rows.append(
                (
                    f"lane:{lane['lane']}",
                    [f"{lane['lane']} lane: {lane['depth']} queued", f"oldest waits {waited}"],
                )
            )
    full = sorted((pool for pool in pools if _is_full(pool)), key=pressure)
    for pool in full[:MAX_FULL_POOLS]:
        queued = pool["normal"]["queued"]
        waited = age(pool.get("oldest_queued_age_seconds"))
        said = f": pool full, {queued} queued"
        name = str(pool["project"])
        if what_width is not None:
            name = short_middle(name, max(what_width - len(said), MIN_PROJECT))
        rows.append((f"queue:{pool['project']}", [name + said, f"oldest waits {waited}"]))
    if len(full) > MAX_FULL_POOLS:
        rows.append(
            ("pools:more-full", [f"{len(full) - MAX_FULL_POOLS} more full pools", "enter: Pools"])
        )
    if not rows:
        rows.append(("pools:quiet", ["all quiet", "nothing failed in the last hour, no queue"]))
    return rows


def replica_rows(replicas: list[dict[str, Any]]) -> list[tuple[str, list[str]]]:
    """The replicas table: alive ones first, as the server orders them."""
    return [
        (
            replica["id"],
            [
                replica["id"],
                replica["state"],
                f"{age(replica['heartbeat_age_seconds'])} ago",
                *workers_and_leases(replica),
            ],
        )
        for replica in replicas
    ]


class OverviewScreen(PollingScreen):
    """Throughput, failures and queues at a glance, and what needs attention."""

    BINDINGS = [Binding("enter", "open", "Show")]  # noqa: RUF012
    # Below 32 lines (an 80x24 terminal) the sparklines take a line each, so that what
    # needs attention keeps rows on screen.
    VERTICAL_BREAKPOINTS = [(0, "-short"), (32, "-tall")]  # noqa: RUF012

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(f"Last hour, per minute ({WINDOW} in {STEP} steps)", classes="section")
        for key, label in SERIES:
            with Horizontal(classes="series"):
                yield Label(label, classes="series-name")
                yield Sparkline([], summary_function=max, id=f"spark-{key}")
                yield Label("", id=f"total-{key}", classes="series-total")
        yield Static("Now", classes="section")
        yield Static("", id="now", markup=False)
        yield Static("Needs attention (enter: show)", classes="section")
        table: DataTable[str] = RowTable(id="attention", cursor_type="row")
        table.add_column("what", key="what")
        table.add_column("detail", key="detail")
        yield table
        yield Static("Replicas", classes="section", id="replicas-title")
        replicas: DataTable[str] = RowTable(id="replicas", cursor_type="row")
        for column in ("replica", "state", "heartbeat", "workers", "leases"):
            replicas.add_column(column, key=column)
        yield replicas
        yield StatusLine()
        yield FittingFooter()

    def fetch(self) -> dict[str, Any]:
        api = self.wq.api
        stats, pools = api.stats(window=WINDOW, step=STEP), api.pools()
        try:
            replicas: list[dict[str, Any]] | None = api.replicas()
        except NotFound:  # a daemon from before replicas were reported (an upgrade)
            replicas = None
        return {"stats": stats, "pools": pools, "replicas": replicas}

    def show(self, data: dict[str, Any]) -> None:
        stats = data["stats"]
        buckets = stats["buckets"]
        for key, _ in SERIES:
            values = [float(bucket[key]) for bucket in buckets]
            self.query_one(f"#spark-{key}", Sparkline).data = values
            last = int(values[-1]) if values else 0
            self.query_one(f"#total-{key}", Label).update(f"{int(sum(values))} (now {last})")
        self.query_one("#now", Static).update(now_line(stats, data["pools"]))
        replicas = data["replicas"] or []
        # Short tables whose rows come and go: a long project gone, its width goes too.
        attention_table = self.query_one("#attention", DataTable)
        attention_rows = attention(stats, data["pools"], replicas)
        # The detail stays on screen: a long project gives way, as in Pools and Items.
        detail = widest((cells[1] for _, cells in attention_rows), "detail")
        longest = widest(cells[0] for _, cells in attention_rows)
        (what_width,) = give_way(
            room(attention_table, len(attention_rows)), [detail], [(MIN_WHAT, longest)]
        )
        attention_rows = attention(stats, data["pools"], replicas, what_width)
        fill(attention_table, attention_rows, narrow=True)
        fill(self.query_one("#replicas", DataTable), replica_rows(replicas), narrow=True)
        alive = sum(replica["state"] == "alive" for replica in replicas)
        self.query_one("#replicas-title", Static).update(
            "Replicas: not reported by this server"
            if data["replicas"] is None
            else f"Replicas: {alive} alive"
            + (f", {len(replicas) - alive} lost" if alive < len(replicas) else "")
        )
        self.status.note("enter on a row shows what it counts")

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.action_open()

    def action_open(self) -> None:
        """The view that explains the row under the cursor."""
        key = selected_key(self.query_one("#attention", DataTable))
        if key is None:
            return
        kind, _, value = key.partition(":")
        if kind == "items":
            self.wq.show_items(phase=value)
        elif kind == "queue":
            self.wq.show_queue(value)
        elif kind == "lane":
            self.wq.show_queue()
        elif kind == "replicas":
            self.query_one("#replicas", DataTable).focus()
        else:
            self.wq.switch_mode("pools")
