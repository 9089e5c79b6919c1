"""Start-up time of the `wq` command next to `python -c "import httpx"`, in the same run.

Times (wall clock, median of `--runs` runs, each a fresh process):

- `python -c "import httpx"`: the floor every HTTP client command pays;
- `wq --help` and `wq status --help`: parsing and help, no request;
- `wq whoami` against a local embedded daemon this script starts on a free loopback
  port with its own XDG directories (so it uses the daemon's local token).

It prints the times and each one's ratio to the httpx import (DESIGN's goal: `--help`
≤ 1.5x). With `--importtime` it also lists the ten slowest imports of `wq status --help`
(`python -X importtime`). Measurements only; nothing is asserted.

    python benchmarks/cli_startup.py [--runs 15] [--importtime]
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

CLEARED = ("WQ_URL", "WQ_TOKEN", "WORKQUEUE_SERVICE_URL", "WORKQUEUE_SERVICE_TOKEN", "WQ_CONFIG")


def _env(root: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in CLEARED}
    env.update(
        XDG_DATA_HOME=str(root / "data"),
        XDG_CACHE_HOME=str(root / "cache"),
        XDG_CONFIG_HOME=str(root / "config"),
        HOME=str(root / "home"),
    )
    return env


def _time(args: list[str], env: dict[str, str], runs: int) -> float:
    """Median wall time of `runs` runs (after one warm-up), in seconds."""
    samples = []
    for index in range(runs + 1):
        start = time.perf_counter()
        subprocess.run(args, env=env, stdout=subprocess.DEVNULL, check=True)
        if index:  # the first run warms the page cache and .pyc files
            samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start_daemon(root: Path, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "wq", "daemon", "--port", str(port)],
        env=env,
        stdout=(root / "daemon.log").open("wb"),
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 60
    tokens = root / "cache" / "wq" / "tokens"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"the daemon exited:\n{(root / 'daemon.log').read_text()}")
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200 and any(
                tokens.glob("*.json")
            ):
                return proc, url
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    proc.kill()
    sys.exit("the daemon did not start within 60 s")


def _importtime(env: dict[str, str]) -> None:
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "wq", "status", "--help"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=True,
    )
    rows = []
    for line in proc.stderr.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit():
            rows.append((int(parts[1]), parts[2].rstrip()))
    print("\nslowest imports of `wq status --help` (cumulative µs):")
    for cumulative, name in sorted(rows, reverse=True)[:10]:
        print(f"  {cumulative:>9}  {name}")


def main() -> None:
    """Run the measurements and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--importtime", action="store_true")
    options = parser.parse_args()
    python = sys.executable
    with tempfile.TemporaryDirectory(prefix="wq-cli-bench-") as tmp:
        root = Path(tmp)
        env = _env(root)
        proc, url = _start_daemon(root, env)
        try:
            results = {
                'python -c "import httpx"': _time(
                    [python, "-c", "import httpx"], env, options.runs
                ),
                "wq --help": _time([python, "-m", "wq", "--help"], env, options.runs),
                "wq status --help": _time(
                    [python, "-m", "wq", "status", "--help"], env, options.runs
                ),
                "wq whoami (local daemon)": _time(
                    [python, "-m", "wq", "whoami", "--url", url], env, options.runs
                ),
            }
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
        base = results['python -c "import httpx"']
        print(f"median of {options.runs} runs each")
        for name, seconds in results.items():
            print(f"{name:<28} {seconds * 1000:8.1f} ms  {seconds / base:5.2f}x httpx import")
        if options.importtime:
            _importtime(env)


if __name__ == "__main__":
    main()
