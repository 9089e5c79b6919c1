"""A stand-alone engine process for multi-process tests.

Usage: python -m tests.support.worker_process DATABASE_URL LOG_FILE POLL_SECONDS

Runs a processing manager for the `chain` type (executions appended to LOG_FILE)
with LISTEN/NOTIFY on PostgreSQL, until SIGTERM; prints "ready" once started.
"""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path

from tests.conftest import make_config
from tests.support.chain import Behaviour, chain_registry
from wq.engine.db import make_engine, make_sessionmaker
from wq.engine.listener import NotifyListener
from wq.engine.processing import ProcessingManager


def main() -> None:
    url, log_file, poll = sys.argv[1], Path(sys.argv[2]), float(sys.argv[3])
    config = make_config(
        url,
        pools={"default": {"capacity": 1000}},
        processing={"workers": 4, "poll_interval_seconds": poll},
    )
    engine = make_engine(url)
    manager = ProcessingManager(
        make_sessionmaker(engine), chain_registry(Behaviour(log_file=log_file)), config
    )
    listener = (
        NotifyListener(engine, manager.wakeup) if engine.dialect.name == "postgresql" else None
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    manager.start()
    if listener:
        listener.start()
    print("ready", flush=True)
    stop.wait()
    manager.stop(grace=5)
    if listener:
        listener.stop()
    engine.dispose()


if __name__ == "__main__":
    main()
