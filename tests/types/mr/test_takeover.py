"""A rescued attempt finds its predecessor's push on GitLab and does not push it again:
every extra git commit would start another CI pipeline; and a push still in flight
when the daemon exits keeps its lease until the request timeout."""

from __future__ import annotations

from datetime import timedelta

from tests.fakes.gitlab import FakeGitLab
from tests.support.waiting import wait_for
from tests.types.mr.harness import PROJECT, Harness
from tests.types.mr.test_converge import BRANCH, open_by_hand
from wq.engine.models import utcnow


def commits_pushed(gitlab: FakeGitLab) -> int:
    return len(gitlab.requests_to("POST", r"/repository/commits"))


def test_a_push_accepted_before_a_crash_is_not_made_again(
    harness: Harness, gitlab: FakeGitLab
) -> None:
    # The worker died right after GitLab accepted its git commit: the branch holds the
    # item's content, no MR was opened, the database knows nothing of it.
    head = gitlab.push(PROJECT, BRANCH, {"sources": "v2\n"}, start="main")

    _, item_id = harness.submit()
    item = harness.settled(item_id)
    assert item.phase == "active" and item.mr_iid is not None
    assert commits_pushed(gitlab) == 0
    assert gitlab.project(PROJECT).resolve(BRANCH) == head


def test_an_adopted_mr_whose_branch_is_right_gets_no_new_commit(
    harness: Harness, gitlab: FakeGitLab
) -> None:
    # The crash came after the MR was opened too.
    head = gitlab.push(PROJECT, BRANCH, {"sources": "v2\n"}, start="main")
    iid = open_by_hand(gitlab)

    _, item_id = harness.submit()
    item = harness.settled(item_id)
    assert (item.phase, item.mr_iid) == ("active", iid)
    assert commits_pushed(gitlab) == 0
    assert gitlab.project(PROJECT).resolve(BRANCH) == head


def test_a_branch_with_other_changes_is_pushed_again(harness: Harness, gitlab: FakeGitLab) -> None:
    gitlab.push(PROJECT, BRANCH, {"sources": "v2\n", "leftover": "x\n"}, start="main")

    _, item_id = harness.submit()
    harness.settled(item_id)
    assert commits_pushed(gitlab) == 1
    assert gitlab.project(PROJECT).text(BRANCH, "leftover") is None


def test_a_push_in_flight_at_shutdown_keeps_the_lease_past_the_request_timeout(
    harness: Harness, gitlab: FakeGitLab
) -> None:
    # GitLab holds the git commit open past the shutdown grace: the exiting daemon's
    # push may still land until its client's timeout (30 s, the default), so no other
    # replica may take the item over before then.
    gitlab.add_latency("POST", r"/repository/commits", 3.0, times=1)
    _, item_id = harness.submit()
    wait_for(lambda: gitlab.requests_to("POST", r"/repository/commits"), message="pushing")
    assert harness.manager.stop(grace=0.2) == [item_id]
    held = harness.item(item_id)
    assert held.leased_until is not None
    assert held.leased_until > utcnow() + timedelta(seconds=25)
    wait_for(lambda: harness.item(item_id).lease_token is None, message="handed back")
