"""A state-changing request never leaves its transaction waiting for a free request thread.

A handler's session was ended after the handler had returned, in a new task of the
request threads' pool. On SQLite a write transaction holds the database's one write
lock until then: with every request thread waiting for that lock, the session could
not be ended, and every request waited out the busy timeout (30 s), then failed (503).
Sessions are now ended on threads of their own.
"""

from __future__ import annotations

import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from fastapi.testclient import TestClient

from tests.conftest import Store, make_config
from tests.support.chain import Behaviour, chain_registry
from wq.daemon.app import create_app
from wq.daemon.runtime import build_runtime

THREADS = 2  # request threads: the lock-up took one request more than these


@pytest.mark.parametrize("path", ["retry", "cancel"])
def test_more_concurrent_writes_than_request_threads_answer_at_once(
    store: Store, path: str
) -> None:
    config = make_config(store.url, server={"request_threads": THREADS, "max_waiting_requests": 64})
    runtime = build_runtime(config, registry=chain_registry(Behaviour()))
    assert runtime.local_tier is not None
    headers = {"Authorization": f"Bearer {runtime.local_tier.token}"}
    try:
        with TestClient(create_app(runtime), raise_server_exceptions=False) as client:

            def post(_: int) -> tuple[int, float]:
                started = time.monotonic()
                answer = client.post(f"/api/work-items/{uuid.uuid4()}/{path}", headers=headers)
                return answer.status_code, time.monotonic() - started

            with ThreadPoolExecutor(4 * THREADS) as pool:
                answers = list(pool.map(post, range(4 * THREADS)))
    finally:
        runtime.engine.dispose()
    assert [status for status, _ in answers] == [404] * (4 * THREADS)
    assert max(seconds for _, seconds in answers) < 10, answers
