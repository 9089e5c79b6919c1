"""A stand-alone engine process for multi-process tests.

Usage: python -m tests.support.worker_process DATABASE_URL LOG_FILE POLL_SECONDS [OPTIONS_JSON]

Runs a processing manager for the `chain` type (executions appended to LOG_FILE)
with LISTEN/NOTIFY on PostgreSQL, until SIGTERM. OPTIONS_JSON may set `processing`
(merged into the test config), `pools`, `sleep` (seconds per chain step) and
`trace_file` (start and end of every action, with pid and time).

Prints "ready" once the manager runs and, on PostgreSQL, `LISTEN` is in effect, so
a test can rely on wake-ups from then on. On SIGTERM it stops with the configured
grace and prints "stopped <ids of actions still running at the deadline>".
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from tests.conftest import make_config
from tests.support.chain import Behaviour, chain_registry
from wq.engine.db import make_engine, make_sessionmaker
from wq.engine.listener import NotifyListener
from wq.engine.processing import ProcessingManager

ROOT = Path(__file__).resolve().parents[2]


def spawn(
    url: str, log_file: Path, poll: float, options: dict[str, Any] | None = None
) -> subprocess.Popen[str]:
    """Start a worker process and return once it printed "ready"."""
    command = [sys.executable, "-m", "tests.support.worker_process", url, str(log_file), str(poll)]
    if options:
        command.append(json.dumps(options))
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    line = process.stdout.readline().strip()
    if line != "ready":
        process.kill()
        raise AssertionError(f"the worker process did not start: {line!r}")
    return process


def main() -> None:
    url, log_file, poll = sys.argv[1], Path(sys.argv[2]), float(sys.argv[3])
    options: dict[str, Any] = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}
    config = make_config(
        url,
        pools=options.get("pools", {"default": {"capacity": 1000}}),
        processing={"workers": 4, "poll_interval_seconds": poll, **options.get("processing", {})},
    )
    engine = make_engine(url, pool_size=config.processing.workers + 5)
    trace = options.get("trace_file")
    behaviour = Behaviour(
        log_file=log_file,
        sleep=options.get("sleep", {}),
        trace_file=Path(trace) if trace else None,
    )
    manager = ProcessingManager(make_sessionmaker(engine), chain_registry(behaviour), config)
    listener = (
        NotifyListener(engine, manager.wakeup) if engine.dialect.name == "postgresql" else None
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    manager.start()
    if listener:
        listener.start()
        if not listener.wait_ready(30):
            print("LISTEN never took effect", file=sys.stderr, flush=True)
            sys.exit(1)
    print("ready", flush=True)
    stop.wait()
    began = time.monotonic()
    leftovers = manager.stop()
    stopped = time.monotonic()
    if listener:
        listener.stop()
    print(
        f"manager stopped after {stopped - began:.2f}s, listener after"
        f" {time.monotonic() - stopped:.2f}s more",
        file=sys.stderr,
        flush=True,
    )
    print("stopped", *leftovers, flush=True)
    # Worker threads still running (past the grace) are daemon threads: exit anyway.


if __name__ == "__main__":
    main()
