"""`wq tui` with 10,000 items over 100 projects: redraw time after a refresh, and RSS.

The script starts a daemon (SQLite, its own XDG directories, a free loopback port, the
`task` type with pools of capacity 0 so every item stays queued), submits `--items`
tasks over `--projects` projects through the API (not timed), then runs `wq tui` in a
child process on a real pseudo-terminal of 120x36, whose output the parent reads and
throws away. The child is the real app with two probes:

- **redraw**: from the moment a refresh's data reaches the UI thread (the `Loaded`
  message is handled, before the view rebuilds its table) to the end of the next paint
  of the screen to the terminal (`App._display`): the cost of putting new data on screen.
- **fetch**: the worker's time to get that data over HTTP (for context; the goal is
  about the redraw).

It measures the Pools view (one row per project), the Items view with its first page
(100 rows), and the Items view after scrolling has loaded 1,000 and then every item,
with the cursor moved to the middle of what is loaded (a refresh fetches the first page
and the rows on screen, and updates the table in place). The last phase, **new item on
top**, submits one item before each refresh while every item is loaded, so each refresh
adds a row above the cursor. Each figure is the median and the maximum over `--samples`
refreshes, with the median number of list requests a refresh made. RSS is the child's
resident set at the end and its peak (`ru_maxrss`). Goals (the issue): redraw <= 100 ms,
RSS <= 150 MB. Nothing is asserted.

    python benchmarks/tui.py [--items 10000] [--projects 100] [--samples 5] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pty
import resource
import select
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import yaml

CLEARED = ("WQ_URL", "WQ_TOKEN", "WORKQUEUE_SERVICE_URL", "WORKQUEUE_SERVICE_TOKEN", "WQ_CONFIG")
SIZE = (120, 36)


# --------------------------------------------------------------------------- the daemon


def _env(root: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in CLEARED}
    env.update(
        XDG_DATA_HOME=str(root / "data"),
        XDG_CACHE_HOME=str(root / "cache"),
        XDG_CONFIG_HOME=str(root / "config"),
        HOME=str(root / "home"),
    )
    return env


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _config(root: Path) -> Path:
    config = {
        "database_url": f"sqlite:///{root / 'wq.db'}",
        "auth": {"local_token": True},
        # Capacity 0: nothing is admitted, so the 10,000 items stay where they are.
        "pools": {"default": {"capacity": 0, "alert_capacity": 0}},
        "handled_types": {"task": {"kinds": {"bench": {"scope": "project", "command": ["true"]}}}},
    }
    path = root / "config.yml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def _start_daemon(root: Path, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], str, str]:
    from wq.engine import schema
    from wq.engine.db import make_engine

    config = _config(root)
    engine = make_engine(f"sqlite:///{root / 'wq.db'}", pool_size=1)
    schema.upgrade(engine)
    engine.dispose()
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "wq", "daemon", "-c", str(config), "--port", str(port)]
    proc = subprocess.Popen(
        command, env=env, stdout=(root / "daemon.log").open("wb"), stderr=subprocess.STDOUT
    )
    deadline = time.monotonic() + 60
    tokens = root / "cache" / "wq" / "tokens"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"the daemon exited:\n{(root / 'daemon.log').read_text()}")
        with contextlib.suppress(httpx.TransportError):
            found = list(tokens.glob("*.json"))
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200 and found:
                token = json.loads(found[0].read_text(encoding="utf-8"))["token"]
                return proc, url, str(token)
        time.sleep(0.1)
    proc.kill()
    sys.exit("the daemon did not start within 60 s")


def _seed(url: str, token: str, items: int, projects: int) -> float:
    """Submit `items` tasks round-robin over `projects` projects; the seconds it took."""
    start = time.perf_counter()
    local = threading.local()

    def submit(n: int) -> None:
        if not hasattr(local, "http"):
            local.http = httpx.Client(
                base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30
            )
        body = {"project": f"bench/p{n % projects:03d}", "kind": "bench", "payload": {"n": n}}
        response = local.http.post("/api/work-items/task", json=body)
        if response.status_code != 201:
            raise SystemExit(f"submission {n} failed: {response.status_code} {response.text}")

    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(submit, range(items)))
    return time.perf_counter() - start


# --------------------------------------------------------------------------- the TUI child


def _child(url: str, out: str, items: int, samples: int, refresh: float) -> None:
    """Run the app on this process's terminal with the probes; write results to `out`."""
    from textual.app import App

    from wq.client.api import ApiClient
    from wq.tui.app import WqApp
    from wq.tui.items import ItemsScreen
    from wq.tui.polling import PollingScreen

    records: list[dict[str, Any]] = []
    pending: dict[str, Any] = {}
    fetch_times: list[float] = []
    requests: list[int] = []
    calls = [0]
    original_display = App._display

    def probe_show(show: Any) -> Any:
        # `show` runs on the UI thread as the `Loaded` message is handled: data arrived.
        def probed(self: PollingScreen, data: Any) -> None:
            pending.clear()
            pending.update(view=type(self).__name__, start=time.perf_counter())
            show(self, data)
            pending["rows"] = len(self.items) if isinstance(self, ItemsScreen) else len(data)
            pending["requests"] = requests[-1] if requests else 0

        return probed

    def probe_fetch(fetch: Any) -> Any:
        def probed(self: PollingScreen) -> Any:
            start, before = time.perf_counter(), calls[0]
            try:
                return fetch(self)
            finally:
                fetch_times.append(time.perf_counter() - start)
                requests.append(calls[0] - before)

        return probed

    def counting(items_page: Any) -> Any:
        def probed(self: ApiClient, **kwargs: Any) -> Any:
            calls[0] += 1
            return items_page(self, **kwargs)

        return probed

    def display(self: App[Any], screen: Any, renderable: Any) -> None:
        original_display(self, screen, renderable)
        if renderable is not None and "start" in pending:
            pending["redraw"] = time.perf_counter() - pending.pop("start")
            records.append(dict(pending))

    App._display = display  # type: ignore[method-assign]
    ApiClient.items_page = counting(ApiClient.items_page)  # type: ignore[method-assign]
    for screen_class in PollingScreen.__subclasses__():
        screen_class.show = probe_show(screen_class.show)  # type: ignore[method-assign]
        screen_class.fetch = probe_fetch(screen_class.fetch)  # type: ignore[method-assign]

    results: dict[str, Any] = {}

    class Bench(WqApp):
        async def on_mount(self) -> None:  # type: ignore[override]
            self.run_worker(self.script(), exclusive=False)

        async def wait_samples(
            self, view: str, rows: int | None, label: str, since: int = 0
        ) -> None:
            seen = 0
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline:
                mine = [
                    r
                    for r in records[since:]
                    if r["view"] == view and (rows is None or r["rows"] == rows)
                ]
                if len(mine) >= samples + 1:  # the first one builds the table: left out
                    self.record(label, mine[1:])
                    return
                seen = len(mine)
                await self._sleep(0.05)
            results[label] = {"rows": rows, "error": f"only {seen} refreshes in 600 s"}

        def record(self, label: str, mine: list[dict[str, Any]]) -> None:
            redraws = [r["redraw"] for r in mine]
            with open(f"{out}.log", "a", encoding="utf-8") as log:
                log.write(f"{label}: {len(mine)} refreshes\n")
            results[label] = {
                "rows": mine[-1]["rows"],
                "redraw_median_ms": statistics.median(redraws) * 1000,
                "redraw_max_ms": max(redraws) * 1000,
                "fetch_median_ms": statistics.median(fetch_times[-len(mine) :]) * 1000,
                "requests_median": statistics.median(r["requests"] for r in mine),
            }

        async def wait_rows(self, rows: int, since: int) -> None:
            deadline = time.monotonic() + 600
            while not any(r["rows"] == rows for r in records[since:]):
                if time.monotonic() > deadline:
                    raise SystemExit(f"{rows} rows never arrived")
                await self._sleep(0.05)

        async def _sleep(self, seconds: float) -> None:
            import asyncio

            await asyncio.sleep(seconds)

        async def new_on_top(self, screen: ItemsScreen) -> None:
            """Submit an item before each refresh; each refresh adds a row above the cursor."""
            import asyncio

            mine: list[dict[str, Any]] = []
            for n in range(samples):
                rows = len(screen.items)
                body = {"project": "bench/new", "kind": "bench", "payload": {"new": n}}
                await asyncio.to_thread(self.api.submit, "task", body)
                since = len(records)
                await self.wait_rows(rows + 1, since)
                mine.append(next(r for r in records[since:] if r["rows"] == rows + 1))
            self.record("items, new item on top", mine)

        async def script(self) -> None:
            try:
                await self.wait_samples("PoolsScreen", None, "pools")
                self.show_items()
                await self.wait_samples("ItemsScreen", 100, "items, first page")
                screen = self.screen
                assert isinstance(screen, ItemsScreen)
                for target in sorted({min(1000, items), items}):
                    since = len(records)
                    screen.want = target  # as scrolling to the end of each page does
                    screen.schedule(0)
                    await self.wait_rows(target, since)
                    # Read in the middle of what is loaded: the rows on screen are refreshed.
                    screen.table.move_cursor(row=target // 2)
                    await self.wait_samples(
                        "ItemsScreen", target, f"items, {target} loaded", since=len(records)
                    )
                await self.new_on_top(screen)
            finally:
                usage = resource.getrusage(resource.RUSAGE_SELF)
                status = Path("/proc/self/status").read_text()
                rss = next(line for line in status.splitlines() if line.startswith("VmRSS"))
                results["rss_mb"] = int(rss.split()[1]) / 1024
                results["peak_rss_mb"] = usage.ru_maxrss / 1024
                Path(out).write_text(json.dumps(results), encoding="utf-8")
                self.exit()

    with ApiClient(url) as api:
        Bench(api, refresh=refresh).run()


def _run_child(env: dict[str, str], url: str, token: str, options: argparse.Namespace) -> Any:
    """The TUI child on a pseudo-terminal of 120x36; its results."""
    out = Path(tempfile.mkdtemp(prefix="wq-tui-bench-")) / "results.json"
    child_env = {**env, "WQ_TOKEN": token, "TERM": "xterm-256color"}
    child_env.update(COLUMNS=str(SIZE[0]), LINES=str(SIZE[1]))
    pid, fd = pty.fork()
    if pid == 0:  # the child: its terminal is the pty
        os.execve(
            sys.executable,
            [
                sys.executable,
                __file__,
                "--child",
                url,
                str(out),
                str(options.items),
                str(options.samples),
                str(options.refresh),
            ],
            child_env,
        )
    fcntl_size = struct.pack("HHHH", SIZE[1], SIZE[0], 0, 0)
    import fcntl

    fcntl.ioctl(fd, termios.TIOCSWINSZ, fcntl_size)
    os.kill(pid, signal.SIGWINCH)
    deadline = time.monotonic() + options.timeout
    status = None
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.2)
            if ready:
                try:
                    os.read(fd, 1 << 16)  # the screen: read and thrown away
                except OSError:
                    break
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
        else:
            os.kill(pid, signal.SIGKILL)
            sys.exit(f"the TUI did not finish within {options.timeout} s")
    finally:
        os.close(fd)
    if status is None:
        _, status = os.waitpid(pid, 0)
    if not out.exists():
        sys.exit(f"the TUI child wrote no results (status {status})")
    return json.loads(out.read_text(encoding="utf-8"))


def main() -> None:
    """Start the daemon, seed it, run the TUI child and print what it measured."""
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _, _, url, out, items, samples, refresh = sys.argv
        _child(url, out, int(items), int(samples), float(refresh))
        return
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--projects", type=int, default=100)
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--refresh", type=float, default=1.0)
    parser.add_argument("--timeout", type=float, default=1200.0)
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="wq-tui-bench-") as tmp:
        root = Path(tmp)
        env = _env(root)
        proc, url, token = _start_daemon(root, env)
        try:
            seeded = _seed(url, token, options.items, options.projects)
            results = _run_child(env, url, token, options)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
    results["seed_seconds"] = seeded
    if options.json:
        print(json.dumps(results, indent=2))
        return
    print(f"{options.items} items over {options.projects} projects, seeded in {seeded:.0f} s")
    print(
        f"{'view':<24} {'rows':>6} {'redraw p50':>11} {'redraw max':>11} {'fetch p50':>10}"
        f" {'requests':>8}"
    )
    for label, row in results.items():
        if not isinstance(row, dict):
            continue
        if "error" in row:
            print(f"{label:<24} {row['rows']:>6} {row['error']}")
            continue
        print(
            f"{label:<24} {row['rows']:>6} {row['redraw_median_ms']:>8.1f} ms"
            f" {row['redraw_max_ms']:>8.1f} ms {row['fetch_median_ms']:>7.0f} ms"
            f" {row['requests_median']:>8.0f}"
        )
    print(
        f"RSS of the TUI: {results['rss_mb']:.0f} MB at the end,"
        f" peak {results['peak_rss_mb']:.0f} MB"
    )
    print("goals: redraw <= 100 ms, RSS <= 150 MB")


if __name__ == "__main__":
    main()
