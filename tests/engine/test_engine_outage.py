"""A database outage seen by the engine: one warning per outage, no traceback per pass.

The manager talks to PostgreSQL through a TCP relay that the test takes down and brings
back, so every connection really fails while it is down (no mocks).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from tests.conftest import Store, make_config
from tests.engine.helpers import load, submit
from tests.fakes.relay import Relay
from tests.support.chain import Behaviour, chain_registry
from tests.support.waiting import wait_for
from wq.engine.db import make_engine, make_sessionmaker
from wq.engine.processing import ProcessingManager

OUTAGE_SECONDS = 2.0


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)  # a server to cut off
def test_an_outage_is_one_warning_and_the_engine_resumes_after_it(
    store: Store, managers: list[Any], caplog: pytest.LogCaptureFixture
) -> None:
    real = make_url(store.url)
    with Relay((real.host or "127.0.0.1", real.port or 5432)) as relay:
        url = real.set(host="127.0.0.1", port=relay.port).render_as_string(hide_password=False)
        engine = make_engine(url, pool_size=4)
        config = make_config(url, processing={"poll_interval_seconds": 0.05, "lease_seconds": 0.6})
        registry = chain_registry(Behaviour())
        manager = ProcessingManager(make_sessionmaker(engine), registry, config)
        manager.start()
        managers.append(manager)
        caplog.set_level(logging.INFO, logger="wq")

        relay.down()
        time.sleep(OUTAGE_SECONDS)  # dozens of scheduler passes, heartbeats and a sweep fail
        relay.up()
        item = submit(store.sessions, registry, config).item
        wait_for(
            lambda: load(store.sessions, item.id).admission == "idle",
            timeout=20,
            message="the item ran its chain after the outage",
        )
        manager.stop(grace=2)
        engine.dispose()

    engine_records = [r for r in caplog.records if r.name.startswith("wq.engine")]
    unavailable = [r for r in engine_records if "database unavailable" in r.getMessage()]
    assert len(unavailable) == 1, [r.getMessage() for r in engine_records]
    assert [r for r in engine_records if r.exc_info] == [], "a traceback was logged"
    assert any("database answering again" in r.getMessage() for r in engine_records)
