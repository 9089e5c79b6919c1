"""`retry_ci_jobs` against the fake GitLab, through the real processing loop."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

import pytest

from tests.conftest import Store
from tests.fakes.gitlab import FakeGitLab
from tests.support.waiting import wait_for
from tests.types.mr.ci_support import CiStage, counted, trace, trace_requests
from tests.types.mr.harness import PROJECT

JOB_RETRY: dict[str, Any] = {
    "retry_delays": ["0"],
    "retry_limit": 2,
    "matchers": [
        {
            "name": "runner-system-failure",
            "description": "Runner system failure",
            "failure_reason": "runner_system_failure",
        },
        {
            "name": "git-clone",
            "description": "Git clone failure",
            "messages": ["/(?m)^fatal: unable to access '/", r"/error: RPC failed; curl \d+/"],
        },
        {
            "name": "network",
            "retry_limit": 1,
            "matchers": [
                {"name": "dns", "messages": ["Could not resolve host:"], "retry_limit": 3},
                {"name": "tls", "messages": ["net/http: TLS handshake timeout"]},
            ],
        },
        {
            "action": "report",
            "matchers": [
                {"name": "oom", "messages": ["Killed"], "tail_lines": 3},
                {"name": "timeout", "failure_reason": "stuck_or_timeout_failure"},
            ],
        },
    ],
}


@pytest.fixture
def stage(store: Store, gitlab: FakeGitLab, monkeypatch: pytest.MonkeyPatch) -> CiStage:
    return CiStage(store, gitlab, monkeypatch, JOB_RETRY)


def test_a_failure_reason_matcher_retries_without_reading_the_trace(
    stage: CiStage, gitlab: FakeGitLab
) -> None:
    before = counted("runner-system-failure", "retried")
    pipeline = stage.pipeline(
        "build",
        {"name": "rpm", "status": "failed", "failure_reason": "runner_system_failure"},
    )
    failed = stage.job(pipeline, "rpm")
    stage.fail(failed)
    item = stage.run()
    retried = stage.job(pipeline, "rpm")
    assert retried.id != failed.id and retried.status == "pending"
    assert gitlab.job(PROJECT, failed.id).retried
    assert trace_requests(gitlab) == []
    row = item.status("needs_ci_retry")
    assert (
        row is not None
        and row.status == "false"
        and row.detail == {"jobs": [], "seen": [failed.id]}
    )
    [(outcome, build, matcher, reason)] = stage.outcomes()
    assert (outcome, build, matcher, reason) == (
        "retried",
        failed.id,
        "runner-system-failure",
        "Runner system failure",
    )
    assert stage.audits()[0].new_state["new_build_id"] == retried.id  # type: ignore[index]
    # A worker event: the worker that ran the action is the actor (the audit conventions).
    assert re.search(r"/(worker-\d+|batch)$", stage.audits()[0].actor), stage.audits()[0].actor
    assert counted("runner-system-failure", "retried") == before + 1


def test_several_jobs_of_one_pipeline_are_decided_in_one_run(
    stage: CiStage, gitlab: FakeGitLab
) -> None:
    """Literal and regex messages, and a genuine failure that mentions the same words."""
    pipeline = stage.pipeline(
        {"name": "clone", "status": "failed", "trace": trace("git-clone-failure")},
        {"name": "rpc", "status": "failed", "trace": trace("git-rpc-failure")},
        {"name": "dns", "status": "failed", "trace": "curl: (6) Could not resolve host: x\n"},
        {"name": "unit", "status": "failed", "trace": trace("genuine-test-failure")},
    )
    jobs = {name: stage.job(pipeline, name) for name in ("clone", "rpc", "dns", "unit")}
    stage.fail(*jobs.values())
    stage.run()
    assert [j.name for j in gitlab.jobs(PROJECT, pipeline.id) if j.status == "pending"] == [
        "clone",
        "rpc",
        "dns",
    ]
    assert stage.job(pipeline, "unit").id == jobs["unit"].id  # not retried
    outcomes = {build: (outcome, matcher) for outcome, build, matcher, _ in stage.outcomes()}
    assert outcomes == {
        jobs["clone"].id: ("retried", "git-clone"),
        jobs["rpc"].id: ("retried", "git-clone"),
        jobs["dns"].id: ("retried", "dns"),
        jobs["unit"].id: ("skipped", None),
    }
    assert stage.jobs_list() == []
    assert len(stage.audits("action_completed")) == 1 + 3  # one retry run after the MR's


def test_tail_lines_and_report_matchers(stage: CiStage, gitlab: FakeGitLab) -> None:
    pipeline = stage.pipeline(
        {"name": "early", "status": "failed", "trace": "Killed\na\nb\nc\nd\n"},
        {"name": "late", "status": "failed", "trace": "a\nb\nKilled\nERROR: Job failed\n"},
        {"name": "slow", "status": "failed", "failure_reason": "stuck_or_timeout_failure"},
    )
    early, late, slow = (stage.job(pipeline, n) for n in ("early", "late", "slow"))
    stage.fail(early, late, slow)
    stage.run()
    assert {(o, b, m) for o, b, m, _ in stage.outcomes()} == {
        ("skipped", early.id, None),  # "Killed" is above the last 3 lines
        ("reported", late.id, "oom"),  # the parent's action reached its child
        ("reported", slow.id, "timeout"),
    }
    assert all(not job.retried for job in gitlab.jobs(PROJECT, pipeline.id))
    assert stage.item().status("needs_ci_retry").status == "false"  # type: ignore[union-attr]


def test_a_child_overrides_the_retry_limit_it_otherwise_inherits(
    stage: CiStage, gitlab: FakeGitLab
) -> None:
    pipeline = stage.pipeline()
    dns = stage.history(pipeline, "dns", 3, trace="Could not resolve host: a\n")
    tls = stage.history(pipeline, "tls", 2, trace="net/http: TLS handshake timeout\n")
    stage.fail(dns, tls, retries={dns.id: 2, tls.id: 1})
    stage.run()
    assert len(stage.retries_of(pipeline, "dns")) == 4  # limit 3 (its own): retried
    assert len(stage.retries_of(pipeline, "tls")) == 2  # limit 1 (its parent's): reported
    assert {(o, b, m) for o, b, m, _ in stage.outcomes()} == {
        ("retried", dns.id, "dns"),
        ("reported", tls.id, "tls"),
    }
    reported = [r for _, b, _, r in stage.outcomes() if b == tls.id]
    assert reported == ["retry limit 1 reached"]


def test_safety_checks_read_the_pipeline(stage: CiStage, gitlab: FakeGitLab) -> None:
    pipeline = stage.pipeline()
    # Retried by hand already: a newer job of that name exists.
    by_hand = stage.history(pipeline, "rpm", 1, failure_reason="runner_system_failure")
    gitlab.set_job(PROJECT, by_hand.id, retried=True)
    newer = gitlab.add_job(PROJECT, pipeline.id, name="rpm", status="running")
    # The event says first attempt, but the pipeline holds three runs (limit 2).
    spent = stage.history(pipeline, "srpm", 3, failure_reason="runner_system_failure")
    stage.fail(by_hand, spent)
    stage.run()
    assert {(o, b, r) for o, b, _, r in stage.outcomes()} == {
        ("skipped", by_hand.id, f"a newer rpm job exists ({newer.id})"),
        ("reported", spent.id, "retry limit 2 reached"),
    }
    assert len(stage.retries_of(pipeline, "rpm")) == 2
    assert len(stage.retries_of(pipeline, "srpm")) == 3


def test_a_job_of_an_older_pipeline_is_skipped(stage: CiStage, gitlab: FakeGitLab) -> None:
    old = stage.pipeline(
        {"name": "rpm", "status": "failed", "failure_reason": "runner_system_failure"}
    )
    stage.fail(stage.job(old, "rpm"))
    new = stage.pipeline("rpm")
    stage.deliver(
        {
            "object_kind": "pipeline",
            "project": {"path_with_namespace": PROJECT},
            "object_attributes": {"id": new.id, "ref": "wq/sync-1", "status": "running"},
        }
    )
    stage.run()
    [(outcome, _, _, reason)] = stage.outcomes()
    assert (outcome, reason) == ("skipped", f"pipeline {old.id} is not the head {new.id}")
    assert len(stage.retries_of(old, "rpm")) == 1
    assert stage.jobs_list() == []


def test_a_retried_job_that_fails_again_is_retried_again(
    stage: CiStage, gitlab: FakeGitLab
) -> None:
    pipeline = stage.pipeline(
        {"name": "rpm", "status": "failed", "failure_reason": "runner_system_failure"}
    )
    first = stage.job(pipeline, "rpm")
    stage.fail(first)
    stage.run()
    second = stage.job(pipeline, "rpm")
    gitlab.set_job(PROJECT, second.id, status="failed", failure_reason="runner_system_failure")
    stage.fail(second, retries=1)
    stage.run()
    third = stage.job(pipeline, "rpm")
    assert [j.id for j in stage.retries_of(pipeline, "rpm")] == [first.id, second.id, third.id]
    assert [(o, b) for o, b, _, _ in stage.outcomes()] == [
        ("retried", first.id),
        ("retried", second.id),
    ]
    # A third failure: two retries are the limit.
    gitlab.set_job(PROJECT, third.id, status="failed", failure_reason="runner_system_failure")
    stage.fail(third, retries=2)
    stage.run()
    assert stage.outcomes()[-1][:2] == ("reported", third.id)
    assert len(stage.retries_of(pipeline, "rpm")) == 3


@pytest.mark.parametrize("fault", ["503", "dropped connection"])
def test_a_trace_fetch_failing_once_is_tried_again(
    stage: CiStage, gitlab: FakeGitLab, fault: str
) -> None:
    pipeline = stage.pipeline(
        {"name": "clone", "status": "failed", "trace": trace("git-clone-failure")}
    )
    clone = stage.job(pipeline, "clone")
    if fault == "503":
        gitlab.fail_next("GET", r"/jobs/\d+/trace$", 503)
    else:
        gitlab.drop_next("GET", r"/jobs/\d+/trace$")
    stage.fail(clone)
    item = stage.run()
    assert len(trace_requests(gitlab)) == 2
    assert item.attempts == 0 and item.phase == "active"
    failures = stage.audits("action_failed")
    assert len(failures) == 1
    error = failures[0].trigger["error"]  # type: ignore[index]
    assert ("503" in error) if fault == "503" else ("cannot reach GitLab" in error)
    assert [(o, b) for o, b, _, _ in stage.outcomes()] == [("retried", clone.id)]


def test_a_gitlab_outage_longer_than_the_attempts_does_not_fail_the_item(
    stage: CiStage, gitlab: FakeGitLab
) -> None:
    """The MR is open: its failed jobs wait out an outage however many attempts it
    takes, the item staying active, and are retried once GitLab answers."""
    pipeline = stage.pipeline(
        {"name": "clone", "status": "failed", "trace": trace("git-clone-failure")}
    )
    clone = stage.job(pipeline, "clone")
    gitlab.fail_next("GET", r"/jobs/\d+/trace$", 503, times=None)
    stage.fail(clone)

    def outage_outlasted() -> None:
        wait_for(lambda: stage.item().attempts > 6, message="more failures than max_attempts")
        assert stage.item().phase == "active", stage.item().error
        gitlab.clear_faults()

    item = stage.run(outage_outlasted)
    assert (item.phase, item.attempts, item.error) == ("active", 0, None)
    assert [(o, b) for o, b, _, _ in stage.outcomes()] == [("retried", clone.id)]


def test_a_missing_job_is_dropped(stage: CiStage, gitlab: FakeGitLab) -> None:
    pipeline = stage.pipeline()
    gone = stage.history(pipeline, "clone", 1, trace="x\n")
    stage.fail(gone)
    gitlab.project(PROJECT).jobs.pop(gone.id)  # erased with its pipeline history
    stage.run()
    assert stage.outcomes() == [("skipped", gone.id, None, "the job is gone (404)")]
    assert stage.jobs_list() == []


def test_without_a_job_retry_config_nothing_is_retried(
    store: Store, gitlab: FakeGitLab, monkeypatch: pytest.MonkeyPatch
) -> None:
    stage = CiStage(store, gitlab, monkeypatch, None)
    pipeline = stage.pipeline(
        {"name": "rpm", "status": "failed", "failure_reason": "runner_system_failure"}
    )
    stage.fail(stage.job(pipeline, "rpm"))
    stage.run()
    assert [o for o, _, _, r in stage.outcomes()] == ["skipped"]
    assert len(stage.retries_of(pipeline, "rpm")) == 1
    assert not any(r.method == "POST" and "/jobs/" in r.path for r in gitlab.requests)


DELAYED: dict[str, Any] = {
    "retry_delays": ["0", "5m"],
    "retry_limit": 5,
    "matchers": [{"name": "system", "failure_reason": "runner_system_failure"}],
}


def test_delays_by_attempt_defer_and_the_sweep_wakes_the_item(
    store: Store, gitlab: FakeGitLab, monkeypatch: pytest.MonkeyPatch
) -> None:
    stage = CiStage(store, gitlab, monkeypatch, DELAYED)
    pipeline = stage.pipeline()
    spec = {"failure_reason": "runner_system_failure"}
    now = stage.history(pipeline, "now", 1, **spec)  # attempt 0: delay "0"
    later = stage.history(pipeline, "later", 2, **spec)  # attempt 1: "5m"
    last = stage.history(pipeline, "last", 4, **spec)  # attempt 3: past the end, "5m" again
    counted = stage.history(pipeline, "counted", 2, **spec)  # attempt 1, from the pipeline
    stage.fail(now, later, last, retries={now.id: 0, later.id: 1, last.id: 3})
    stage.fail(counted, retries_count=None)  # an event without retries_count
    item = stage.run()
    assert len(stage.retries_of(pipeline, "now")) == 2
    assert len(stage.retries_of(pipeline, "later")) == 2
    assert len(stage.retries_of(pipeline, "last")) == 4
    assert len(stage.retries_of(pipeline, "counted")) == 2
    row = item.status("needs_ci_retry")
    assert row is not None and row.status == "true"
    waiting = {job["build_id"]: job["not_before"] for job in row.detail["jobs"]}
    assert set(waiting) == {later.id, last.id, counted.id}
    finished = datetime.fromisoformat(later.finished_at.replace("Z", "+00:00"))
    assert datetime.fromisoformat(waiting[later.id]) == finished + timedelta(minutes=5)
    assert row.pending_until == min(datetime.fromisoformat(v) for v in waiting.values())
    assert [o for o, *_ in stage.outcomes()] == ["retried"] + ["deferred"] * 3

    stage.run()  # nothing is due: nothing happens
    assert len(stage.outcomes()) == 4

    stage.travel(5 * 60)  # five minutes later the sweep finds the deferral due
    item = stage.run()
    assert len(stage.retries_of(pipeline, "later")) == 3
    assert len(stage.retries_of(pipeline, "last")) == 5
    assert len(stage.retries_of(pipeline, "counted")) == 3
    assert [o for o, *_ in stage.outcomes()] == ["retried"] + ["deferred"] * 3 + ["retried"] * 3
    assert item.status("needs_ci_retry").status == "false"  # type: ignore[union-attr]


def test_a_retry_call_failing_after_another_retry_keeps_both(
    stage: CiStage, gitlab: FakeGitLab
) -> None:
    spec = {"status": "failed", "failure_reason": "runner_system_failure"}
    pipeline = stage.pipeline({"name": "a", **spec}, {"name": "b", **spec})
    a, b = stage.job(pipeline, "a"), stage.job(pipeline, "b")
    gitlab.fail_next("POST", rf"/jobs/{b.id}/retry$", 502)
    stage.fail(a, b)
    item = stage.run()
    # a's retry is kept (and audited) although b's failed; b went in the next run.
    assert [(o, j) for o, j, _, _ in stage.outcomes()] == [("retried", a.id), ("retried", b.id)]
    assert len(stage.retries_of(pipeline, "a")) == len(stage.retries_of(pipeline, "b")) == 2
    assert stage.audits("action_failed") == [] and item.attempts == 0
    assert stage.jobs_list() == []


def test_only_the_end_of_a_long_trace_is_read(
    store: Store, gitlab: FakeGitLab, monkeypatch: pytest.MonkeyPatch
) -> None:
    stage = CiStage(store, gitlab, monkeypatch, JOB_RETRY, job_trace_max_bytes=200)
    early = trace("git-clone-failure") + "x" * 300 + "\nERROR: Job failed: exit code 1\n"
    late = "x" * 300 + "\nerror: RPC failed; curl 56 GnuTLS recv error (-9)\nfatal: early EOF\n"
    pipeline = stage.pipeline(
        {"name": "early", "status": "failed", "trace": early},
        {"name": "late", "status": "failed", "trace": late},
    )
    stage.fail(stage.job(pipeline, "early"), stage.job(pipeline, "late"))
    stage.run()
    assert {(o, m) for o, _, m, _ in stage.outcomes()} == {
        ("skipped", None),
        ("retried", "git-clone"),
    }
    assert len(stage.retries_of(pipeline, "late")) == 2


def test_a_job_failing_while_the_executor_runs_is_kept(stage: CiStage, gitlab: FakeGitLab) -> None:
    pipeline = stage.pipeline(
        {"name": "clone", "status": "failed", "trace": trace("git-clone-failure")},
        {"name": "rpm", "status": "failed", "failure_reason": "runner_system_failure"},
    )
    clone, rpm = stage.job(pipeline, "clone"), stage.job(pipeline, "rpm")
    gitlab.add_latency("GET", r"/jobs/\d+/trace$", 1.0, times=1)
    stage.fail(clone)

    def while_the_trace_is_read() -> None:
        wait_for(lambda: trace_requests(gitlab) != [], message="the trace request")
        stage.fail(rpm)  # applied at once: the executor holds no lock while it waits

    stage.run(while_the_trace_is_read)
    assert len(stage.retries_of(pipeline, "clone")) == len(stage.retries_of(pipeline, "rpm")) == 2
    assert [(o, b) for o, b, _, _ in stage.outcomes()] == [
        ("retried", clone.id),
        ("retried", rpm.id),
    ]
    assert stage.jobs_list() == []


def test_a_429_is_retried_after_the_time_gitlab_asks(
    store: Store, gitlab: FakeGitLab, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The longest backoff above the time asked: it bounds what a server may ask for.
    stage = CiStage(store, gitlab, monkeypatch, JOB_RETRY, {"backoff_max_seconds": 60})
    pipeline = stage.pipeline(
        {"name": "clone", "status": "failed", "trace": trace("git-clone-failure")}
    )
    gitlab.fail_next("GET", r"/jobs/\d+/trace$", 429, retry_after=1)
    stage.fail(stage.job(pipeline, "clone"))
    stage.run()
    [failure] = stage.audits("action_failed")
    assert failure.trigger["retry_in_seconds"] >= 1  # type: ignore[index]
    assert [o for o, *_ in stage.outcomes()] == ["retried"]


def test_a_redelivered_build_event_after_the_retry_changes_nothing(stage: CiStage) -> None:
    pipeline = stage.pipeline(
        {"name": "rpm", "status": "failed", "failure_reason": "runner_system_failure"}
    )
    failed = stage.job(pipeline, "rpm")
    stage.fail(failed)
    stage.run()
    assert stage.jobs_list() == []
    set_before = len(stage.audits("dimension_set"))

    stage.fail(failed)  # the same event again (SQS at-least-once, a webhook resent)
    item = stage.run()
    row = item.status("needs_ci_retry")
    assert row is not None and row.status == "false"
    assert len(stage.audits("dimension_set")) == set_before
    assert [(o, b) for o, b, _, _ in stage.outcomes()] == [("retried", failed.id)]
