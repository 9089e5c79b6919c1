#!/usr/bin/env python
"""The HTTP API under open-loop load: p50/p99 and errors per endpoint, in one run.

A real `wq daemon` (a subprocess, on loopback) serves a throwaway PostgreSQL database
holding `--items` MR items (default 100) whose project has a pool of capacity 0, so
nothing is processed and the API is measured alone. Then, for `--seconds`, requests
are started at fixed rates whatever the answers take (open loop, like independent
clients; a slow server builds a backlog instead of slowing the load down):

* `GET /api/work-items/{id}` (a random one of the items) at `--item-rate`,
* `GET /api/work-items?limit=50` at `--list-rate`,
* `POST /api/work-items/mr` resubmitting one item unchanged at `--submit-rate`,
* `GET /healthz` at `--health-rate`.

Each answer's latency is measured from the moment its request was due; an answer
other than 2xx, or none within `--timeout`, is an error. `--warm-up S` sends the same
load for S seconds first and leaves it out of the figures (by default the first
requests meet a daemon and a client that have just started). This is a measurement,
never a test. See benchmarks/README.md for the figures and the issue's goals.

    python benchmarks/api.py                              # 200/s item+submit, 100/s list
    python benchmarks/api.py --item-rate 50 --seconds 20
    python benchmarks/api.py --warm-up 1                  # the steady state only
    python benchmarks/api.py --list-rate 0 --submit-rate 0 --floor   # GET item / floor
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import math
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import yaml
from databases import add_admin_url, bench_database
from loadgen import Outcome, Pool, encode_request, open_loop
from sqlalchemy import insert

from wq.engine import schema
from wq.engine.config import ServerConfig
from wq.engine.db import make_engine
from wq.engine.models import WorkItemStatus

PROJECT = "bench/api"
TOKEN_ENV = "WQ_BENCH_GITLAB_TOKEN"


def free_port() -> int:
    """An unused loopback port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def daemon_config(url: str, server: dict[str, int]) -> dict[str, Any]:
    """A daemon handling `mr` for one project whose pool admits nothing."""
    return {
        "database_url": url,
        "server": server,
        "processing": {"poll_interval_seconds": 5, "sweep_interval_seconds": 3600},
        "pools": {PROJECT: {"capacity": 0, "alert_capacity": 0}},
        "handled_types": {
            # Never called: the pool admits nothing, and submissions do not call GitLab.
            "mr": {
                "gitlab_url": "http://127.0.0.1:9",
                "projects": {"bench": {"token_env": TOKEN_ENV}},
            }
        },
    }


def mr_payload(number: int) -> dict[str, Any]:
    """The same desired state every time for one branch: a resubmission is unchanged."""
    return {
        "project": PROJECT,
        "source_branch": f"wq/bench-{number:04d}",
        "title": f"bench {number}",
        "commit_message": f"bench {number}",
        "file_actions": [{"action": "update", "file_path": "f.txt", "content": f"{number}\n"}],
    }


def cpu_seconds(pid: int) -> tuple[float, float]:
    """User and system CPU seconds a process has used (Linux /proc; NaN elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return math.nan, math.nan
    # utime and stime are fields 14 and 15 of stat(5), counted after the command's ")".
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile of sorted values (NaN when empty)."""
    if not values:
        return math.nan
    return values[max(1, math.ceil(fraction * len(values))) - 1]


class Daemon:
    """`wq daemon` as a subprocess with a private cache (for its local token)."""

    def __init__(
        self,
        url: str,
        root: Path,
        server: dict[str, int],
        document: dict[str, Any] | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.root = root
        self.port = free_port()
        config = root / "config.yml"
        document = document or daemon_config(url, server)
        config.write_text(yaml.safe_dump(document), encoding="utf-8")
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("WQ_", "WORKQUEUE_"))},
            "XDG_CACHE_HOME": str(root / "cache"),
            "XDG_CONFIG_HOME": str(root / "config"),
            "HOME": str(root),
            TOKEN_ENV: "glpat-not-used",
            **(env or {}),
        }
        command = [sys.executable, "-m", "wq", "daemon", "-c", str(config)]
        command += ["--port", str(self.port)]
        self.log = (root / "daemon.log").open("wb")
        self.proc = subprocess.Popen(
            command, env=env, cwd=root, stdout=self.log, stderr=subprocess.STDOUT
        )
        self.base = f"http://127.0.0.1:{self.port}"

    def wait_ready(self, timeout: float = 60.0) -> str:
        """Until /healthz answers; the daemon's local token."""
        deadline = time.monotonic() + timeout
        tokens = self.root / "cache" / "wq" / "tokens"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit((self.root / "daemon.log").read_text())
            try:
                ok = httpx.get(f"{self.base}/healthz", timeout=2).status_code == 200
            except httpx.TransportError:
                ok = False
            files = list(tokens.glob("*.json"))
            if ok and files:
                token: str = json.loads(files[0].read_text())["token"]
                return token
            time.sleep(0.1)
        raise SystemExit("the daemon did not start")

    def stop(self) -> None:
        """Terminate it and wait."""
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


class Replica:
    """A daemon's keep-alive pool and the requests of the load, encoded with its token."""

    def __init__(self, base: str, token: str, ids: list[str]) -> None:
        authority = base.removeprefix("http://")
        host, _, port = authority.partition(":")
        self.pool = Pool(host, int(port))
        self.items = [encode_request("GET", f"/api/work-items/{i}", authority, token) for i in ids]
        self.page = encode_request("GET", "/api/work-items?limit=50", authority, token)
        self.submits = [
            encode_request(
                "POST", "/api/work-items/mr", authority, token, json.dumps(mr_payload(n)).encode()
            )
            for n in range(len(ids))
        ]
        self.health = encode_request("GET", "/healthz", authority, token)


async def measure(
    replicas: list[Replica], args: argparse.Namespace, started: Callable[[], None]
) -> None:
    """Run the four open loops at once and print the table; `started` is called when
    the measured load starts (after `--warm-up`).

    The requests are encoded before the load starts (`loadgen`): the client must stay
    cheap beside the daemon it measures on the same two cores. With several replicas,
    each loop sends its requests to them in turn, as a load balancer in front of
    them would.
    """
    chooser = random.Random(1)
    turns = itertools.cycle(replicas)

    def to_next(pick: Callable[[Replica], bytes]) -> Callable[[], tuple[Pool, bytes]]:
        def next_request() -> tuple[Pool, bytes]:
            replica = next(turns)
            return replica.pool, pick(replica)

        return next_request

    loops = {
        "GET item": (args.item_rate, to_next(lambda r: chooser.choice(r.items))),
        "GET list (50)": (args.list_rate, to_next(lambda r: r.page)),
        "POST submit (unchanged)": (args.submit_rate, to_next(lambda r: chooser.choice(r.submits))),
        "/healthz": (args.health_rate, to_next(lambda r: r.health)),
    }
    names = [name for name, (rate, _) in loops.items() if rate > 0]

    # Each loop a different fraction of its interval late: with the same phase,
    # loops at the same rate sent their requests in bursts (four at once at 20/s
    # each, every 50 ms), and each waited for the others: a p50 of 17-20 ms.
    def run_loops(seconds: float) -> Awaitable[list[Outcome]]:
        return asyncio.gather(
            *(
                open_loop(loops[n][0], seconds, loops[n][1], args.timeout, i / len(names))
                for i, n in enumerate(names)
            )
        )

    if args.warm_up > 0:
        await run_loops(args.warm_up)
    started()
    results = await run_loops(args.seconds)
    for replica in replicas:
        replica.pool.close()
    header = ("endpoint", "rate/s", "sent", "p50 ms", "p99 ms", "max ms", "503", "errors")
    print(f"{header[0]:<26}" + "".join(f"{title:>9}" for title in header[1:]))
    for name, outcome in zip(names, results, strict=True):
        latencies = outcome.latencies
        print(
            f"{name:<26}{loops[name][0]:>9g}{outcome.sent:>9}{percentile(latencies, 0.5):>9.1f}"
            f"{percentile(latencies, 0.99):>9.1f}{(latencies[-1] if latencies else math.nan):>9.1f}"
            f"{outcome.shed:>9}{outcome.errors:>9}"
        )
    print(f"connections opened: {sum(replica.pool.opened for replica in replicas)}")


def add_dimensions(url: str, ids: list[str], count: int) -> None:
    """Give every item `count` dimensions, as processing would (the pool admits nothing)."""
    if count <= 0:
        return
    engine = make_engine(url, pool_size=1)
    now = datetime.now(UTC)
    rows = [
        {
            "work_item_id": uuid.UUID(item_id),
            "dimension": f"bench_{n}",
            "variant": "",
            "status": "false" if n % 2 else "true",
            "detail": {"reason": f"bench dimension {n}"},
            "pending_until": None,
            "updated_at": now,
        }
        for item_id in ids
        for n in range(count)
    ]
    with engine.begin() as connection:
        connection.execute(insert(WorkItemStatus.__table__), rows)
    engine.dispose()


def spy(pid: int, output: str, seconds: float) -> subprocess.Popen[bytes]:
    """py-spy sampling the daemon for the load's duration (its threads, GIL holders)."""
    command = ["py-spy", "record", "--pid", str(pid), "--duration", str(math.ceil(seconds))]
    command += ["--rate", "250", "--format", "raw", "--gil", "--nonblocking", "--output", output]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL)


def measure_floor(args: argparse.Namespace, document: bytes, root: Path) -> float:
    """`api_floor.py` answering `document` under the GET item load: its CPU per request."""
    (root / "document.json").write_bytes(document)
    port, token = free_port(), uuid.uuid4().hex
    floor = Path(__file__).with_name("api_floor.py")
    command = [sys.executable, str(floor), str(port), str(root / "document.json"), token]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        base, deadline = f"http://127.0.0.1:{port}", time.monotonic() + 30
        while True:
            try:
                headers = {"Authorization": f"Bearer {token}"}
                if httpx.get(f"{base}/api/work-items/{uuid.uuid4()}", headers=headers).is_success:
                    break
            except httpx.TransportError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise SystemExit("the floor server did not start") from None
                time.sleep(0.1)
        pool = Pool("127.0.0.1", port)
        target = f"/api/work-items/{uuid.uuid4()}"
        request = encode_request("GET", target, f"127.0.0.1:{port}", token)

        async def load() -> Outcome:
            try:
                return await open_loop(
                    args.item_rate, args.seconds, lambda: (pool, request), args.timeout
                )
            finally:
                pool.close()

        start = cpu_seconds(proc.pid)
        outcome = asyncio.run(load())
        end = cpu_seconds(proc.pid)
        print(
            f"floor (bare FastAPI endpoint, the same document): {outcome.sent} GET at "
            f"{args.item_rate:g}/s, p50 {percentile(outcome.latencies, 0.5):.1f} ms, p99 "
            f"{percentile(outcome.latencies, 0.99):.1f} ms, {outcome.errors} errors"
        )
        return (sum(end) - sum(start)) * 1000 / outcome.sent
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=100)
    parser.add_argument(
        "--dimensions",
        type=int,
        default=0,
        help="readiness dimensions per item (processed items have a few; new ones none)",
    )
    parser.add_argument(
        "--replicas",
        type=int,
        default=1,
        help="daemons on the one database; requests go to them in turn, as through a "
        "load balancer (each has its own local token)",
    )
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument(
        "--warm-up",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="send the same load this long first, not counted (default 0: the first "
        "requests meet a daemon and a client that have just started)",
    )
    parser.add_argument("--item-rate", type=float, default=200.0)
    parser.add_argument("--list-rate", type=float, default=100.0)
    parser.add_argument("--submit-rate", type=float, default=200.0)
    parser.add_argument("--health-rate", type=float, default=10.0)
    parser.add_argument("--timeout", type=float, default=5.0, help="per request (s)")
    server_defaults = ServerConfig()
    parser.add_argument(
        "--request-threads",
        type=int,
        default=server_defaults.request_threads,
        help="the daemons' server.request_threads",
    )
    parser.add_argument(
        "--max-waiting",
        type=int,
        default=server_defaults.max_waiting_requests,
        help="the daemons' server.max_waiting_requests",
    )
    add_admin_url(parser)
    parser.add_argument("--database-url", default=None)
    parser.add_argument(
        "--floor",
        action="store_true",
        help="then send the GET item load to a bare FastAPI endpoint answering the same "
        "document (api_floor.py), and print wq's CPU per request as a multiple of it",
    )
    parser.add_argument(
        "--py-spy",
        metavar="FILE",
        help="sample the (first) daemon with py-spy (installed separately) while loaded; "
        "FILE gets collapsed stacks (`-f raw`) of the thread holding the GIL",
    )
    args = parser.parse_args(argv)
    server = {"request_threads": args.request_threads, "max_waiting_requests": args.max_waiting}
    with bench_database(args.database_url, args.admin_url, False, prefix="wq_bench_api") as url:
        engine = make_engine(url, pool_size=1)
        schema.upgrade(engine)
        engine.dispose()
        with tempfile.TemporaryDirectory(prefix="wq-bench-api-") as tmp:
            daemons = []
            try:
                for number in range(args.replicas):
                    root = Path(tmp) / f"replica-{number}"
                    root.mkdir()
                    daemons.append(Daemon(url, root, server))
                tokens = [daemon.wait_ready() for daemon in daemons]
                ids = []
                with httpx.Client(
                    base_url=daemons[0].base, headers={"Authorization": f"Bearer {tokens[0]}"}
                ) as http:
                    for number in range(args.items):
                        response = http.post("/api/work-items/mr", json=mr_payload(number))
                        response.raise_for_status()
                        ids.append(response.json()["item"]["id"])
                add_dimensions(url, ids, args.dimensions)
                replicas = [
                    Replica(daemon.base, token, ids)
                    for daemon, token in zip(daemons, tokens, strict=True)
                ]
                warm_up = f" after {args.warm_up:g} s not counted" if args.warm_up > 0 else ""
                print(
                    f"{args.replicas} wq daemon(s) on PostgreSQL, {args.items} MR items with "
                    f"{args.dimensions} dimensions each, open loop for {args.seconds:g} s"
                    f"{warm_up}, {args.request_threads} request threads, shedding past "
                    f"{args.max_waiting} waiting (load average {os.getloadavg()[0]:.2f})"
                )
                pids = [daemon.proc.pid for daemon in daemons]
                sampler: subprocess.Popen[bytes] | None = None
                daemon_start: list[tuple[float, float]] = []
                client_cpu = 0.0

                def started() -> None:
                    nonlocal sampler, daemon_start, client_cpu
                    if args.py_spy:
                        sampler = spy(pids[0], args.py_spy, args.seconds)
                    daemon_start = [cpu_seconds(pid) for pid in pids]
                    client_cpu = time.process_time()

                asyncio.run(measure(replicas, args, started))
                user = system = 0.0
                for pid, (user_start, system_start) in zip(pids, daemon_start, strict=True):
                    user_end, system_end = cpu_seconds(pid)
                    user += user_end - user_start
                    system += system_end - system_start
                client_cpu = time.process_time() - client_cpu
                requests = args.seconds * (
                    args.item_rate + args.list_rate + args.submit_rate + args.health_rate
                )
                per_request = (user + system) * 1000 / requests
                print(
                    f"CPU during the load: daemons {user + system:.2f} s (user {user:.2f}, system "
                    f"{system:.2f}; {per_request:.2f} ms per request), "
                    f"this client {client_cpu:.2f} s (load average after {os.getloadavg()[0]:.2f})"
                )
                if sampler is not None:
                    sampler.wait(timeout=60)
                if args.floor:
                    document = httpx.get(
                        f"{daemons[0].base}/api/work-items/{ids[0]}",
                        headers={"Authorization": f"Bearer {tokens[0]}"},
                    ).content
                    floor = measure_floor(args, document, Path(tmp))
                    print(
                        f"CPU per request: wq {per_request:.2f} ms, the floor {floor:.2f} ms: "
                        f"wq costs {per_request / floor:.2f}x the floor"
                    )
            finally:
                for daemon in daemons:
                    daemon.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
