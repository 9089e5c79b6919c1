"""The daemon's metrics: found through its sessions, counted only once a change commits."""

from __future__ import annotations

import pytest

from tests.conftest import Store
from tests.engine.helpers import submit
from tests.support.chain import Behaviour, chain_registry
from wq.engine.db import make_sessionmaker
from wq.engine.items import set_phase
from wq.engine.metrics import DEFAULT, METRICS_KEY, Metrics, metrics_of
from wq.engine.models import CANCELLED, WorkItem


def cancelled(metrics: Metrics) -> float | None:
    return metrics.registry.get_sample_value(
        "hummingbird_workqueue_phase_transitions_total", {"type": "chain", "phase": "cancelled"}
    )


def test_a_change_is_counted_once_it_commits_and_never_when_rolled_back(store: Store) -> None:
    metrics = Metrics(process=False)
    sessions = make_sessionmaker(store.engine)
    sessions.configure(info={METRICS_KEY: metrics})
    intake = submit(store.sessions, chain_registry(Behaviour()), store.config)
    assert intake.item is not None
    with sessions() as session:
        item = session.get(WorkItem, intake.item.id)
        assert item is not None
        set_phase(session, item, CANCELLED, actor="test", trigger={"source": "test"})
        session.flush()
        session.rollback()
    assert cancelled(metrics) is None
    with sessions.begin() as session:
        item = session.get(WorkItem, intake.item.id)
        assert item is not None
        set_phase(session, item, CANCELLED, actor="test", trigger={"source": "test"})
        assert cancelled(metrics) is None  # not before the commit
    assert cancelled(metrics) == 1
    # Another daemon's metrics (and the fallback) saw nothing.
    assert cancelled(Metrics(process=False)) is None


def test_sessions_without_a_daemon_count_in_the_default(store: Store) -> None:
    assert metrics_of(store.sessions) is DEFAULT
    with store.sessions() as session:
        assert metrics_of(session) is DEFAULT
    assert metrics_of(None) is DEFAULT


@pytest.mark.parametrize("prefix", ["", "wq", "wq-", "1wq_"])
def test_a_bad_prefix_is_refused(prefix: str) -> None:
    with pytest.raises(ValueError, match="prefix"):
        Metrics(prefix=prefix, process=False)
