"""The warm-up at start: the pool's connections open, every route matched once, the
OpenAPI document built, and nothing of it seen from outside (no audit row, no request
counted, no log line)."""

from __future__ import annotations

import logging

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from tests.conftest import Store
from wq.daemon.app import create_app
from wq.daemon.runtime import Runtime
from wq.daemon.warm import NO_ROUTE
from wq.engine.models import AuditEntry


def test_the_warm_up_opens_the_pool_and_leaves_no_trace(
    store: Store, runtime: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    threads = runtime.config.server.request_threads
    app = create_app(runtime)
    with caplog.at_level(logging.INFO), TestClient(app) as client:
        assert runtime.engine.pool.checkedin() >= threads  # type: ignore[attr-defined]
        # Built before the first request asks for it (the shell completion's types).
        assert app.openapi_schema is not None
        exposition = client.get("/metrics").text
    assert NO_ROUTE not in exposition
    assert not [record for record in caplog.records if NO_ROUTE in record.getMessage()]
    with store.sessions() as session:
        assert session.scalar(select(func.count()).select_from(AuditEntry)) == 0
