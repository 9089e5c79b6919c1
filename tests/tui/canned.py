"""A canned wq API for the TUI's snapshots: fixed ids, fixed times, the real client.

The documents go through the server's own response models before they are served, so
they have exactly the shape the daemon gives; the TUI reads them through `ApiClient`
over an `httpx.MockTransport`. Ages are computed against `NOW`, the app's clock.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from pydantic import BaseModel

from wq.client.api import ApiClient
from wq.client.credentials import Credentials
from wq.client.cursors import item_cursor, item_key
from wq.daemon.routers.identity import WhoamiPublic
from wq.daemon.routers.pools import PoolPublic, QueuePagePublic
from wq.daemon.routers.replicas import ReplicaPublic
from wq.daemon.routers.stats import StatsPublic
from wq.daemon.schemas import HistoryPage, PendingEventPage, WorkItemPage, WorkItemPublic

URL = "http://wq.example:8080"
NOW = datetime(2026, 1, 5, 12, 0, 0, tzinfo=UTC)
PROJECTS = ("team/api", "team/web", "infra/dns")


def ago(**delta: float) -> str:
    return (NOW - timedelta(**delta)).isoformat()


def item_id(n: int) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"{URL}/items/{n}"))


def dump(model: type[BaseModel], document: Any) -> Any:
    """Validate with the server's model and serialise as the server would."""
    return model.model_validate(document).model_dump(mode="json")


def pool(project: str, in_flight: int, queued: int, alert_queued: int, oldest: float) -> Any:
    return {
        "project": project,
        "capacity": 4,
        "alert_capacity": 1,
        "queued_autonomous_cap": 6,
        "normal": {"capacity": 4, "in_flight": in_flight, "queued": queued},
        "alert": {"capacity": 1, "in_flight": min(1, alert_queued), "queued": alert_queued},
        "queued_autonomous": queued // 2,
        "oldest_queued_at": ago(seconds=oldest) if queued + alert_queued else None,
        "oldest_queued_age_seconds": oldest if queued + alert_queued else None,
    }


POOLS = [
    pool("team/api", 4, 6, 1, 754.0),
    pool("team/web", 2, 0, 0, 0.0),
    pool("infra/dns", 4, 9, 0, 3600.0),
]


def hour_of_stats(failed_at: tuple[int, ...] = (3, 41)) -> Any:
    """An hour in minutes: steady completions, a burst at minute 50, failures where told."""
    start = NOW - timedelta(hours=1)
    buckets = []
    for minute in range(60):
        done = 4 + (12 if minute == 50 else minute % 3)
        buckets.append(
            {
                "start": (start + timedelta(minutes=minute)).isoformat(),
                "created": done + 1,
                "admitted": done,
                "completed": done,
                "failed": 1 if minute in failed_at else 0,
                "retried": 0,
                "cancelled": 0,
                "wait_p50_seconds": 2.0,
                "wait_p95_seconds": 30.0,
                "run_p50_seconds": 40.0,
                "run_p95_seconds": 95.0,
            }
        )
    lanes = [
        {
            "lane": "alert",
            "depth": 1,
            "oldest_queued_at": ago(seconds=60),
            "oldest_wait_seconds": 60.0,
        },
        {
            "lane": "normal",
            "depth": 6,
            "oldest_queued_at": ago(seconds=754),
            "oldest_wait_seconds": 754.0,
        },
    ]
    document = {
        "start": start.isoformat(),
        "end": NOW.isoformat(),
        "step_seconds": 60,
        "buckets": buckets,
        "lanes": lanes,
    }
    return dump(StatsPublic, document)


def dimension(name: str, status: str, *, until: str | None = None, detail: Any = None) -> Any:
    return {
        "dimension": name,
        "variant": "",
        "status": status,
        "detail": detail,
        "pending_until": until,
        "updated_at": ago(minutes=3),
    }


def replica(n: int, state: str = "alive", **fields: Any) -> Any:
    """A daemon's row as `GET /api/replicas` shows it."""
    beat = 2.0 if state == "alive" else 95.0
    return {
        "id": f"wq-{n}:1",
        "host": f"wq-{n}",
        "pid": 1,
        "version": "0.1.0",
        "state": state,
        "started_at": ago(hours=3),
        "heartbeat_at": ago(seconds=beat),
        "heartbeat_age_seconds": beat,
        "heartbeat_seconds": 10.0,
        "workers_busy": 3,
        "workers_total": 10,
        "leases_held": 3,
        "being_rescued": 0,
        "consumes_events": n == 1,
        "last_event_at": ago(seconds=40) if n == 1 else None,
        "db_round_trip_ms": 0.8,
        **fields,
    }


REPLICAS = [replica(1), replica(2)]


def item(n: int, **fields: Any) -> Any:
    """An `mr` item; `n` orders them (higher is newer)."""
    document = {
        "id": item_id(n),
        "type": "mr",
        "project": PROJECTS[n % len(PROJECTS)],
        "phase": "active",
        "attempts": n % 3,
        "error": None,
        "admission": "queued",
        "lane": "normal",
        "seq": 100 + n,
        "autonomous": n % 2 == 0,
        "dedup_key": None,
        "idempotency_key": None,
        "leased_until": None,
        "lease_owner": None,
        "run_after": None,
        "last_event_at": None,
        "queued_at": ago(minutes=40 - n),
        "admitted_at": None,
        "created_at": ago(minutes=40 - n),
        "updated_at": ago(minutes=30 - n),
        "details": {"source_branch": f"wq/bump-{n}", "target_branch": "main", "iid": 40 + n},
        "dimensions": [
            dimension("needs_reconcile", "false"),
            dimension("needs_ci_retry", "true", detail={"jobs": [{"build_id": 7000 + n}]}),
            dimension(
                "needs_empty_check",
                "true",
                until=(NOW + timedelta(minutes=25 - n)).isoformat(),
            ),
        ],
        **fields,
    }
    return dump(WorkItemPublic, document)


ITEMS = [
    item(n, **extra)
    for n, extra in (
        (12, {}),
        (11, {"phase": "failed", "admission": "done", "error": "GitLab said 409: conflict"}),
        (10, {"admission": "admitted", "admitted_at": ago(minutes=2), "project": "team/api"}),
        # Backing off: failed twice, back in line and not admitted before then.
        (9, {"attempts": 2, "run_after": (NOW + timedelta(minutes=4)).isoformat()}),
        (8, {"phase": "cancelled", "admission": "done"}),
        (7, {"admission": "idle"}),
        (6, {}),
        (5, {"phase": "completed", "admission": "done"}),
        (4, {"lane": "alert", "project": "team/api"}),
        (3, {}),
        (2, {"admission": "admitted", "admitted_at": ago(minutes=9), "project": "team/api"}),
        (1, {}),
    )
]

HISTORY = [
    {
        "id": 31,
        "at": ago(minutes=5),
        "event_type": "phase_changed",
        "actor": "system",
        "old_state": {"phase": "active", "attempts": 2},
        "new_state": {"phase": "failed", "attempts": 3},
        "trigger": {"source": "executor", "action": "ensure_mr"},
    },
    {
        "id": 22,
        "at": ago(minutes=20),
        "event_type": "admitted",
        "actor": "system",
        "old_state": {"admission": "queued"},
        "new_state": {"admission": "admitted"},
        "trigger": {"source": "dispatcher"},
    },
    {
        "id": 11,
        "at": ago(minutes=29),
        "event_type": "created",
        "actor": "ada",
        "old_state": None,
        "new_state": {"phase": "active", "admission": "queued", "lane": "normal"},
        "trigger": {"source": "api"},
    },
]

PENDING = [
    {
        "id": 7,
        "event_type": "merge_request",
        "event_at": ago(seconds=40),
        "created_at": ago(seconds=38),
        "payload": {"object_attributes": {"action": "approved", "iid": 51}},
    },
    {
        "id": 8,
        "event_type": "pipeline",
        "event_at": ago(seconds=20),
        "created_at": ago(seconds=19),
        "payload": {"object_attributes": {"status": "failed", "id": 9001}},
    },
]

WHOAMI = {
    "authentication": {"tier": "openshift", "identity": "ada", "groups": ["admins"]},
    "authorization": {
        "effective_permissions": {"mr": ["read", "retry", "submit"]},
        "matching_rules": [],
    },
}


def queue_page(project: str, lane: str) -> Any:
    queued = [i for i in ITEMS if i["project"] == project and i["admission"] == "queued"]
    in_lane = sorted((i for i in queued if i["lane"] == lane), key=lambda i: i["seq"])
    entries = [
        {
            key: entry[key]
            for key in (
                "id",
                "type",
                "project",
                "lane",
                "seq",
                "autonomous",
                "attempts",
                "run_after",
            )
        }
        | {"position": position, "queued_at": entry["queued_at"]}
        for position, entry in enumerate(in_lane, start=1)
    ]
    return dump(QueuePagePublic, {"entries": entries, "next_cursor": None})


class CannedServer:
    """The daemon's read endpoints over the documents above (or given items).

    It logs every request path, can hold answers back (`delay`, seconds) and counts the
    requests in flight at once per path, for the tests of the polling itself.
    """

    def __init__(
        self,
        items: list[Any] | None = None,
        delay: float = 0.0,
        stats: Any = None,
        pools: list[Any] | None = None,
        replicas: list[Any] | None = None,
    ) -> None:
        self.replicas = REPLICAS if replicas is None else replicas
        self.pools = pools  # None: the module's POOLS as they are at each request
        self.items = ITEMS if items is None else items
        self.stats = hour_of_stats() if stats is None else stats
        self.logs: dict[str, str] = {}  # a task's output so far, by item id
        self.delay = delay
        self.paths: list[str] = []
        self.item_limits: list[int] = []  # the `limit` of every item-list request
        self.bulk: list[tuple[str, Any]] = []  # (action, selector) of each bulk request
        self.in_flight: dict[str, int] = {}
        self.most_in_flight: dict[str, int] = {}
        self._lock = threading.Lock()

    def items_page(self, params: httpx.QueryParams) -> Any:
        keys = ("type", "phase", "project", "admission")
        found = [i for i in self.items if all(i[k] == params[k] for k in keys if k in params)]
        if "search" in params:  # as the daemon searches: project or error, or the id's start
            text = params["search"].lower()
            found = [
                i
                for i in found
                if text in i["project"].lower()
                or text in (i["error"] or "").lower()
                or i["id"].startswith(text)
            ]
        # As the daemon pages: newest first by (created_at, id), the cursor the keyset
        # position of the item before the page.
        found.sort(key=item_key, reverse=True)
        if "cursor" in params:
            micros, _, hex_id = params["cursor"].partition("-")
            after = (int(micros), hex_id)
            found = [i for i in found if item_key(i) < after]
        limit = int(params.get("limit") or 50)
        assert 1 <= limit <= 500, limit
        self.item_limits.append(limit)
        page = found[:limit]
        more = len(found) > limit
        return dump(
            WorkItemPage, {"items": page, "next_cursor": item_cursor(page[-1]) if more else None}
        )

    def handle(self, request: httpx.Request) -> httpx.Response:
        with self._lock:
            self.paths.append(request.url.path)
            path = request.url.path
            self.in_flight[path] = self.in_flight.get(path, 0) + 1
            self.most_in_flight[path] = max(self.most_in_flight.get(path, 0), self.in_flight[path])
        try:
            if self.delay:
                time.sleep(self.delay)
            return self.answer(request)
        finally:
            with self._lock:
                self.in_flight[path] -= 1

    def answer(self, request: httpx.Request) -> httpx.Response:
        path, params = request.url.path, request.url.params
        body: Any
        if request.method == "POST" and path in ("/api/work-items/retry", "/api/work-items/cancel"):
            # The bulk actions: every named id done, as a server that found them so.
            selector = json.loads(request.content)
            self.bulk.append((path.rsplit("/", 1)[1], selector))
            done = "retried" if path.endswith("retry") else "cancelled"
            results = [{"id": i, "type": "mr", "outcome": done} for i in selector["ids"]]
            return httpx.Response(200, json={"results": results, "more": False})
        if path == "/openapi.json":  # the part `submission_types` reads
            submit = {"post": {"tags": ["submissions"], "summary": "Submit"}}
            body = {"paths": {f"/api/work-items/{name}": submit for name in ("mr", "task")}}
        elif path == "/api/whoami":
            body = dump(WhoamiPublic, WHOAMI)
        elif path == "/api/replicas":
            body = [dump(ReplicaPublic, replica) for replica in self.replicas]
        elif path == "/api/stats":
            body = self.stats
        elif path == "/api/pools":
            body = [dump(PoolPublic, p) for p in (POOLS if self.pools is None else self.pools)]
        elif path.startswith("/api/pools/"):
            project = path[len("/api/pools/") :]
            body = dump(PoolPublic, next(p for p in POOLS if p["project"] == project))
        elif path.startswith("/api/queue/"):
            body = queue_page(params["project"], path.rsplit("/", 1)[1])
        elif path == "/api/work-items":
            body = self.items_page(params)
        elif path.endswith("/logs"):
            return self.output(path.split("/")[-2], params)
        elif path.endswith("/history"):
            body = dump(HistoryPage, {"entries": HISTORY, "next_cursor": None})
        elif path.endswith("/pending-events"):
            body = dump(PendingEventPage, {"events": PENDING, "next_cursor": None})
        elif path.startswith("/api/work-items/"):
            body = next(i for i in self.items if i["id"] == path.rsplit("/", 1)[1])
        else:
            return httpx.Response(404, json={"error": f"not canned: {path}"})
        return httpx.Response(200, json=body)

    def output(self, item_id: str, params: httpx.QueryParams) -> httpx.Response:
        """A task's output as the daemon sends it: text, its last `tail` lines."""
        if item_id not in self.logs:
            error = "the task has not started a run yet (follow it to wait for one)"
            return httpx.Response(409, json={"error": error})
        lines = self.logs[item_id].splitlines(keepends=True)
        tail = int(params.get("tail", len(lines)))
        text = "".join(lines[len(lines) - tail :] if tail else [])
        return httpx.Response(200, text=text, headers={"Content-Type": "text/plain"})


def canned_api(server: CannedServer | None = None) -> ApiClient:
    """The real client over the canned transport."""
    server = server or CannedServer()
    credentials = Credentials(URL, environ={"WQ_TOKEN": "canned"}, login=None)
    return ApiClient(URL, credentials=credentials, transport=httpx.MockTransport(server.handle))
