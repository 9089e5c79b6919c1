"""MR executors against the fake GitLab, through the real processing loop."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from tests.conftest import Store
from tests.fakes.gitlab import FakeGitLab
from tests.support.waiting import wait_for
from tests.types.mr.harness import DASHBOARD, PROJECT, Harness
from tests.types.mr.helpers import TOKEN, mr_registry
from wq.engine.models import AuditEntry, WorkItem, utcnow
from wq.types.mr.models import MrItem


def test_full_chain_creates_branch_commit_mr_and_dashboard_note(
    harness: Harness, gitlab: FakeGitLab
) -> None:
    _, item_id = harness.submit()
    item = harness.settled(item_id)
    assert item.phase == "active" and item.mr_iid is not None
    mr = gitlab.merge_request(PROJECT, item.mr_iid)
    assert (mr.title, mr.source_branch, mr.target_branch) == ("Sync sources", "wq/sync-1", "main")
    assert sorted(mr.labels) == ["managed-by::workqueue", "sync"]
    assert gitlab.project(PROJECT).text("wq/sync-1", "sources") == "v2\n"
    assert item.mr_url and item.mr_url.endswith(f"/merge_requests/{item.mr_iid}")
    notes = [note for note in mr.user_notes() if DASHBOARD in note.body]
    assert len(notes) == 1 and notes[0].internal
    dashboard = item.status("needs_dashboard")
    assert dashboard is not None and dashboard.status == "false"
    assert dashboard.detail == {"note_id": notes[0].id, "url": f"{DASHBOARD}/work-items/{item_id}"}
    for deferred in ("needs_empty_check", "needs_reconcile"):
        row = item.status(deferred)
        assert row is not None and row.status == "true" and row.is_deferred(utcnow())
    assert harness.actions(item_id) == ["ensure_mr", "ensure_dashboard_note", "retry_ci_jobs"]


def test_no_dashboard_configured_means_no_note(
    store: Store, gitlab: FakeGitLab, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness = Harness(store, mr_registry(monkeypatch, gitlab_url=gitlab.url))
    harness.manager.start()
    try:
        _, item_id = harness.submit()
        item = harness.settled(item_id)
        assert item.mr_iid is not None
        assert gitlab.merge_request(PROJECT, item.mr_iid).user_notes() == []
        assert item.status("needs_dashboard").status == "false"  # type: ignore[union-attr]
    finally:
        harness.manager.stop(grace=2)


def test_update_force_pushes_and_keeps_gitlabs_draft_state(
    harness: Harness, gitlab: FakeGitLab
) -> None:
    item_id, iid = harness.opened(draft=True)
    assert gitlab.merge_request(PROJECT, iid).title == "Draft: Sync sources"

    new = [{"action": "update", "file_path": "sources", "content": "v3\n"}]
    assert harness.submit(draft=True, file_actions=new, title="Sync v3")[0] == "updated"
    harness.settled(item_id)
    wait_for(
        lambda: gitlab.project(PROJECT).text("wq/sync-1", "sources") == "v3\n", message="force push"
    )
    assert gitlab.merge_request(PROJECT, iid).title == "Draft: Sync v3"

    gitlab.update_merge_request(PROJECT, iid, title="Sync v3")  # a person marks it ready
    newer = [{"action": "update", "file_path": "sources", "content": "v4\n"}]
    assert harness.submit(draft=True, file_actions=newer, title="Sync v4")[0] == "updated"
    wait_for(
        lambda: gitlab.project(PROJECT).text("wq/sync-1", "sources") == "v4\n",
        message="second force push",
    )
    harness.settled(item_id)
    assert gitlab.merge_request(PROJECT, iid).title == "Sync v4"  # still ready
    assert harness.item(item_id).details_dict()["draft"] is True  # as first submitted


def test_empty_diff_before_creation_cancels_without_an_mr(
    harness: Harness, gitlab: FakeGitLab
) -> None:
    same = [{"action": "update", "file_path": "sources", "content": "v1\n"}]
    _, item_id = harness.submit(file_actions=same)
    item = harness.settled(item_id)
    assert (item.phase, item.admission, item.mr_iid) == ("cancelled", "done", None)
    assert "already on main" in (item.error or "")
    assert gitlab.project(PROJECT).merge_requests == {}
    assert "wq/sync-1" not in gitlab.project(PROJECT).branches


def test_empty_after_force_push_closes_the_mr(harness: Harness, gitlab: FakeGitLab) -> None:
    item_id, iid = harness.opened()
    same = [{"action": "update", "file_path": "sources", "content": "v1\n"}]
    assert harness.submit(file_actions=same)[0] == "updated"
    wait_for(lambda: harness.item(item_id).phase == "cancelled", message="cancelled")
    mr = gitlab.merge_request(PROJECT, iid)
    assert mr.state == "closed"
    assert any("diff is empty" in note.body for note in mr.user_notes())
    assert "wq/sync-1" not in gitlab.project(PROJECT).branches


def test_an_empty_check_after_a_merge_it_missed_completes_the_item(
    harness: Harness, gitlab: FakeGitLab
) -> None:
    """Merged on GitLab and the event missed: the merge deleted the source branch, whose
    compare is a 404. The check finds the MR merged first, rather than failing on it."""
    item_id, iid = harness.opened()
    gitlab.update_merge_request(PROJECT, iid, state="merged")
    assert "wq/sync-1" not in gitlab.project(PROJECT).branches
    harness.due_now(item_id, "needs_empty_check")
    wait_for(lambda: harness.item(item_id).phase != "active", message="ended")
    item = harness.item(item_id)
    assert (item.phase, item.error) == ("completed", None)


def test_check_empty_diff_cycle_and_transient_errors(harness: Harness, gitlab: FakeGitLab) -> None:
    item_id, iid = harness.opened()

    gitlab.fail_next("GET", r"/repository/compare", 503)
    harness.due_now(item_id, "needs_empty_check")
    item = harness.settled(item_id)
    assert item.phase == "active" and item.attempts == 0  # transient: logged, not fatal
    assert item.status("needs_empty_check").is_deferred(utcnow())  # type: ignore[union-attr]

    gitlab.push(PROJECT, "main", {"sources": "v2\n"}, message="upstream caught up")
    harness.due_now(item_id, "needs_empty_check")
    wait_for(lambda: harness.item(item_id).phase == "cancelled", message="cancelled")
    assert gitlab.merge_request(PROJECT, iid).state == "closed"
    assert harness.actions(item_id).count("check_empty_diff") == 2


def test_reconcile_merges_only_when_mergeable_and_asked(
    harness: Harness, gitlab: FakeGitLab
) -> None:
    _, manual = harness.submit()
    _, auto = harness.submit(source_branch="wq/auto", auto_merge=True)
    manual_iid = harness.settled(manual).mr_iid
    auto_iid = harness.settled(auto).mr_iid
    assert manual_iid is not None and auto_iid is not None

    gitlab.set_merge_status(PROJECT, auto_iid, "ci_still_running")
    harness.due_now(auto, "needs_reconcile")
    assert harness.settled(auto).phase == "active"
    assert gitlab.merge_request(PROJECT, auto_iid).state == "opened"

    gitlab.set_merge_status(PROJECT, auto_iid, None)  # mergeable again
    harness.due_now(auto, "needs_reconcile")
    harness.due_now(manual, "needs_reconcile")
    wait_for(lambda: harness.item(auto).phase == "completed", message="auto-merged")
    assert gitlab.merge_request(PROJECT, auto_iid).state == "merged"
    assert harness.settled(manual).phase == "active"
    assert gitlab.merge_request(PROJECT, manual_iid).state == "opened"


@pytest.mark.parametrize("refusal", [405, 406, 409, 422])
def test_a_merge_gitlab_refuses_for_now_leaves_the_item_active(
    harness: Harness, gitlab: FakeGitLab, refusal: int
) -> None:
    """GitLab refuses a merge in a race (a pipeline started, the branch moved, a
    conflict, merged meanwhile): the item is reconciled again, not failed."""
    item_id, iid = harness.opened(auto_merge=True)
    gitlab.fail_next("PUT", r"/merge$", refusal)
    harness.due_now(item_id, "needs_reconcile")
    refused = harness.settled(item_id)
    assert (refused.phase, refused.error) == ("active", None)
    assert gitlab.merge_request(PROJECT, iid).state == "opened"
    harness.due_now(item_id, "needs_reconcile")
    wait_for(lambda: harness.item(item_id).phase == "completed", message="merged at last")
    assert gitlab.merge_request(PROJECT, iid).state == "merged"


def test_the_merge_names_the_commit_gitlab_said_was_mergeable(
    harness: Harness, gitlab: FakeGitLab
) -> None:
    # Without the commit, GitLab merges whatever the branch holds by then: a push between
    # the look and the merge would go in unchecked. With it, GitLab refuses (409).
    item_id, iid = harness.opened(auto_merge=True)
    head = gitlab.merge_request(PROJECT, iid).sha
    harness.due_now(item_id, "needs_reconcile")
    wait_for(lambda: harness.item(item_id).phase == "completed", message="merged")
    (merge,) = [r for r in gitlab.requests if r.method == "PUT" and r.path.endswith("/merge")]
    assert {**merge.query, **(merge.json or {})}.get("sha") == head, merge


def test_a_gitlab_outage_longer_than_the_attempts_does_not_fail_a_reconciled_item(
    harness: Harness, gitlab: FakeGitLab
) -> None:
    """The periodic reconcile of an open MR retries through an outage: the item stays
    active, its error saying why, and is merged once GitLab answers again."""
    item_id, iid = harness.opened(auto_merge=True)
    max_attempts = harness.manager.config.processing.max_attempts
    gitlab.fail_next("GET", rf"/merge_requests/{iid}$", 503, times=None)
    harness.due_now(item_id, "needs_reconcile")
    wait_for(lambda: harness.item(item_id).attempts > max_attempts + 1, message="outage outlasted")
    waiting = harness.item(item_id)
    assert waiting.phase == "active", waiting.error
    assert "reconcile_mr: GitLab answered 503" in (waiting.error or "")

    gitlab.clear_faults()
    wait_for(lambda: harness.item(item_id).phase == "completed", message="merged after it")
    assert gitlab.merge_request(PROJECT, iid).state == "merged"


def test_reconcile_restores_drifted_title_and_follows_a_merge_on_gitlab(
    harness: Harness, gitlab: FakeGitLab
) -> None:
    item_id, iid = harness.opened()
    gitlab.update_merge_request(PROJECT, iid, title="Someone renamed it", description="x")
    harness.due_now(item_id, "needs_reconcile")
    harness.settled(item_id)
    wait_for(
        lambda: gitlab.merge_request(PROJECT, iid).title == "Sync sources", message="title restored"
    )
    assert gitlab.merge_request(PROJECT, iid).description == "Automated sync"

    gitlab.update_merge_request(PROJECT, iid, state="merged")
    harness.due_now(item_id, "needs_reconcile")
    wait_for(lambda: harness.item(item_id).phase == "completed", message="completed")
    assert harness.item(item_id).admission == "done"


def test_transient_errors_back_off_and_count_as_failures(
    harness: Harness, gitlab: FakeGitLab
) -> None:
    gitlab.fail_next("POST", r"/repository/commits", 502)
    _, item_id = harness.submit()
    wait_for(lambda: harness.item(item_id).mr_iid is not None, message="created after 502")
    item = harness.item(item_id)
    # The 502 was counted; the success after it ended the run of failures.
    assert (item.attempts, item.error) == (0, None)
    assert ["502" in error for error in harness.failures(item_id)] == [True]


def test_an_answer_that_is_not_json_is_retried_not_fatal(
    harness: Harness, gitlab: FakeGitLab
) -> None:
    """A proxy's page in GitLab's place (a maintenance page, a login portal) says
    nothing of the MR: the action is tried again, and the item is not failed."""
    gitlab.fail_next("POST", r"/merge_requests$", 200, body="<html>Maintenance</html>")
    _, item_id = harness.submit()
    wait_for(lambda: harness.item(item_id).mr_iid is not None, message="created after the page")
    assert harness.failures(item_id) == ["ensure_mr: GitLab's answer could not be read (not JSON)"]


def test_a_gitlab_that_drips_its_answer_holds_a_worker_no_longer_than_the_timeout(
    store: Store, gitlab: FakeGitLab, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each read of a byte a second is within the read timeout: only a limit on the
    whole call frees the worker (and lets the shutdown's bound on a call hold)."""
    registry = mr_registry(monkeypatch, gitlab_url=gitlab.url, request_timeout_seconds=1)
    harness = Harness(store, registry)
    gitlab.drip_next("POST", r"/merge_requests$", every=0.2)
    harness.manager.start()
    try:
        _, item_id = harness.submit()
        wait_for(lambda: harness.item(item_id).mr_iid is not None, message="created after it")
    finally:
        harness.manager.stop(grace=2)
    assert harness.failures(item_id) == [
        "ensure_mr: cannot reach GitLab: no whole answer within 1 s"
    ]


@pytest.mark.parametrize(
    ("asked", "waits"), [("30", 30), ("inf", 60), ("1e12", 60), ("3000000000", 60)]
)
def test_a_429_waits_its_retry_after_up_to_the_longest_backoff(
    store: Store, gitlab: FakeGitLab, monkeypatch: pytest.MonkeyPatch, asked: str, waits: int
) -> None:
    # A server asking for forever neither breaks the failure's record (a wait too long
    # for a date) nor parks the item, and its slot, for years.
    registry = mr_registry(monkeypatch, gitlab_url=gitlab.url)
    harness = Harness(store, registry, processing={"backoff_max_seconds": 60})
    gitlab.fail_next("POST", r"/merge_requests$", 429, headers={"Retry-After": asked})
    harness.manager.start()
    try:
        _, item_id = harness.submit()
        wait_for(lambda: harness.item(item_id).attempts == 1, message="429 recorded")
        waiting = harness.item(item_id)
        assert waiting.run_after is not None and waiting.phase == "active"
        assert "429" in (waiting.error or "")
        left = (waiting.run_after - utcnow()).total_seconds()
        assert waits - 5 <= left <= waits, left
    finally:
        harness.manager.stop(grace=2)


def test_permanent_errors_fail_the_item_with_a_readable_message(
    store: Store, gitlab: FakeGitLab, monkeypatch: pytest.MonkeyPatch
) -> None:
    gitlab.add_token("glpat-narrow", projects=["elsewhere"])
    registry = mr_registry(monkeypatch, gitlab_url=gitlab.url)
    monkeypatch.setenv("WQ_TEST_GITLAB_TOKEN", "glpat-narrow")  # sees no group/ project
    harness = Harness(store, registry)
    harness.manager.start()
    try:
        _, item_id = harness.submit()
        wait_for(lambda: harness.item(item_id).phase == "failed", message="failed")
        item = harness.item(item_id)
        assert item.attempts == 1  # no pointless retries
        assert item.error == "ensure_mr: GitLab answered 404: 404 Project Not Found"
        assert "glpat" not in item.error
    finally:
        harness.manager.stop(grace=2)


def test_the_reconcile_moves_the_head_pipeline_forward_only(
    harness: Harness, gitlab: FakeGitLab
) -> None:
    # GitLab's MR answer may lag behind the pipeline events: an older head read from it
    # made the newest pipeline's failed jobs look stale, and let an older pipeline in.
    _, item_id = harness.submit()
    harness.settled(item_id)
    pipeline = gitlab.add_pipeline(PROJECT, "wq/sync-1")

    def reconciled_with_head(head: int) -> int | None:
        with harness.store.sessions.begin() as session:
            found = session.get(WorkItem, item_id)
            assert isinstance(found, MrItem)
            found.head_pipeline_id = head
        done = harness.actions(item_id).count("reconcile_mr")
        harness.due_now(item_id, "needs_reconcile")
        wait_for(
            lambda: harness.actions(item_id).count("reconcile_mr") > done,
            message="reconciled",
        )
        return harness.settled(item_id).head_pipeline_id

    assert reconciled_with_head(pipeline.id + 100) == pipeline.id + 100
    assert reconciled_with_head(pipeline.id - 1) == pipeline.id


def test_an_answer_quoting_the_token_is_kept_without_it(
    harness: Harness, gitlab: FakeGitLab
) -> None:
    # A proxy in front of GitLab that echoes the request's headers in its error page,
    # the token in capitals as some do (a token's letters are case-sensitive, but the
    # capitals give most of it away).
    echoed = {"message": f"rejected PRIVATE-TOKEN: {TOKEN} (policy; {TOKEN.upper()})"}
    gitlab.fail_next("POST", r"/merge_requests$", 403, body=echoed)
    _, item_id = harness.submit()
    wait_for(lambda: harness.item(item_id).phase == "failed", message="failed")
    error = harness.item(item_id).error or ""
    assert "rejected PRIVATE-TOKEN: [token] (policy; [token])" in error, error
    with harness.store.sessions() as session:
        triggers = session.execute(
            select(AuditEntry.trigger).where(AuditEntry.work_item_id == item_id)
        ).scalars()
        assert not [trigger for trigger in triggers if TOKEN.upper() in str(trigger).upper()]


def test_a_lost_answer_to_the_mr_creation_is_adopted_not_duplicated(
    harness: Harness, gitlab: FakeGitLab
) -> None:
    # GitLab created the MR but its answer was lost (so was the database commit): the
    # retry adopts the open MR instead of opening a second one.
    gitlab.drop_next("POST", r"/merge_requests$")
    _, item_id = harness.submit()
    wait_for(
        lambda: harness.item(item_id).mr_iid is not None,
        timeout=20,
        message="MR adopted after the dropped answer",
    )
    harness.settled(item_id)
    assert len(gitlab.project(PROJECT).merge_requests) == 1


def test_a_resubmission_during_ensure_mr_is_pushed_too(
    harness: Harness, gitlab: FakeGitLab
) -> None:
    gitlab.add_latency("POST", r"/repository/commits", 1.0, times=1)
    _, item_id = harness.submit()
    wait_for(
        lambda: (
            gitlab.requests_to("POST", r"/merge_requests$")
            or gitlab.requests_to("GET", r"/merge_requests")
        ),
        message="ensure_mr under way",
    )
    newer = [{"action": "update", "file_path": "sources", "content": "v3\n"}]
    assert harness.submit(file_actions=newer)[0] == "updated"
    wait_for(
        lambda: gitlab.project(PROJECT).text("wq/sync-1", "sources") == "v3\n",
        timeout=20,
        message="the newer content pushed",
    )
    item = harness.settled(item_id)
    assert item.status("needs_mr").status == "false"  # type: ignore[union-attr]
    assert item.attempts == 0


def test_a_new_title_during_ensure_mr_reaches_the_mr_too(
    harness: Harness, gitlab: FakeGitLab
) -> None:
    """Only the title changes while the first push is under way: the MR still gets it
    (the item does not take the MR as current for the title it started with)."""
    gitlab.add_latency("POST", r"/repository/commits", 1.0, times=1)
    _, item_id = harness.submit()
    wait_for(lambda: gitlab.requests_to("POST", r"/repository/commits"), message="pushing")
    assert harness.submit(title="Sync, retitled")[0] == "updated"
    item = harness.settled(item_id)
    assert item.mr_iid is not None
    assert gitlab.merge_request(PROJECT, item.mr_iid).title == "Sync, retitled"
    assert item.status("needs_mr").status == "false"  # type: ignore[union-attr]
