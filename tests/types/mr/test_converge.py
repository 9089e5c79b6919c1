"""ensure_mr converges on whatever GitLab has: an open MR it did not record is adopted
and brought to the item's state, a 409 on creation is such an MR, labels the service
no longer wants come off (others' stay), and a new target branch retargets the MR.
"""

from __future__ import annotations

import gitlab as python_gitlab

from tests.fakes.gitlab import FakeGitLab
from tests.support.waiting import wait_for
from tests.types.mr.harness import PROJECT, Harness
from tests.types.mr.helpers import TOKEN
from wq.engine.items import set_phase
from wq.engine.models import WorkItem

BRANCH = "wq/sync-1"
MANAGED = "managed-by::workqueue"


def open_by_hand(gitlab: FakeGitLab, **attrs: object) -> int:
    """Open an MR through GitLab's API, as another replica or a person would."""
    client = python_gitlab.Gitlab(gitlab.url, private_token=TOKEN)
    project = client.projects.get(PROJECT)
    mr = project.mergerequests.create(
        {"source_branch": BRANCH, "target_branch": "main", "title": "Opened elsewhere", **attrs}
    )
    return int(mr.iid)


def labels(gitlab: FakeGitLab, iid: int) -> set[str]:
    return set(gitlab.merge_request(PROJECT, iid).labels)


def test_a_crash_after_gitlab_opened_the_mr_is_adopted_and_converged(
    harness: Harness, gitlab: FakeGitLab
) -> None:
    # An earlier attempt pushed other content and opened the MR, then died before its
    # database commit: the item has no mr_iid, GitLab has a stale MR for the branch.
    gitlab.push(PROJECT, BRANCH, {"sources": "stale\n", "leftover": "x\n"}, start="main")
    iid = open_by_hand(
        gitlab, description="stale description", labels=f"{MANAGED},sync,someone-elses"
    )

    _, item_id = harness.submit(draft=True)
    item = harness.settled(item_id)
    assert (item.phase, item.mr_iid, item.attempts) == ("active", iid, 0)
    assert item.status("needs_mr").status == "false"  # type: ignore[union-attr]
    assert len(gitlab.project(PROJECT).merge_requests) == 1
    project = gitlab.project(PROJECT)
    assert project.text(BRANCH, "sources") == "v2\n"  # the item's content, force-pushed
    assert project.text(BRANCH, "leftover") is None  # rebuilt from the target branch
    mr = gitlab.merge_request(PROJECT, iid)
    assert mr.title == "Draft: Sync sources"  # the item's draft applies on adoption
    assert mr.description == "Automated sync"
    assert labels(gitlab, iid) == {MANAGED, "sync", "someone-elses"}
    assert harness.item(item_id).applied_labels == sorted({MANAGED, "sync"})


def test_a_409_on_creation_means_the_mr_exists_and_is_converged(
    harness: Harness, gitlab: FakeGitLab
) -> None:
    # Another replica opens the MR between our look-up and our creation.
    gitlab.add_latency("POST", r"/repository/commits", 1.0, times=1)
    _, item_id = harness.submit()
    wait_for(lambda: gitlab.requests_to("POST", r"/repository/commits"), message="pushing")
    gitlab.push(PROJECT, BRANCH, {"sources": "theirs\n"}, start="main")
    iid = open_by_hand(gitlab, description="theirs")

    item = harness.settled(item_id)
    creations = [r.status for r in gitlab.requests_to("POST", r"/merge_requests$")]
    assert 409 in creations  # the path under test was taken
    assert (item.phase, item.mr_iid, item.attempts, item.error) == ("active", iid, 0, None)
    assert len(gitlab.project(PROJECT).merge_requests) == 1
    assert gitlab.project(PROJECT).text(BRANCH, "sources") == "v2\n"
    mr = gitlab.merge_request(PROJECT, iid)
    assert (mr.title, mr.description) == ("Sync sources", "Automated sync")
    assert MANAGED in mr.labels and "sync" in mr.labels


def test_an_mr_reopened_by_hand_is_adopted_by_the_next_generation(
    harness: Harness, gitlab: FakeGitLab
) -> None:
    _, first = harness.submit(labels=["sync", "old-label"])
    iid = harness.settled(first).mr_iid
    assert iid is not None
    gitlab.update_merge_request(PROJECT, iid, state="closed")
    with harness.store.sessions.begin() as session:  # as the close event does
        closed = session.get(WorkItem, first)
        assert closed is not None
        set_phase(session, closed, "cancelled", actor="test", trigger={"source": "test"})
    gitlab.update_merge_request(PROJECT, iid, state="opened")  # a person reopens it
    gitlab.update_merge_request(PROJECT, iid, labels=[*labels(gitlab, iid), "human"])

    newer = [{"action": "update", "file_path": "sources", "content": "v3\n"}]
    outcome, second = harness.submit(file_actions=newer, title="Sync v3", labels=["sync"])
    assert outcome == "created" and second != first
    item = harness.settled(second)
    assert (item.phase, item.mr_iid, item.generation) == ("active", iid, 1)
    assert gitlab.project(PROJECT).text(BRANCH, "sources") == "v3\n"
    assert gitlab.merge_request(PROJECT, iid).title == "Sync v3"
    # old-label was the service's (the first generation applied it): it comes off.
    assert labels(gitlab, iid) == {MANAGED, "sync", "human"}


def test_an_update_removes_only_the_labels_the_service_applied(
    harness: Harness, gitlab: FakeGitLab
) -> None:
    _, item_id = harness.submit(labels=["sync", "extra"])
    iid = harness.settled(item_id).mr_iid
    assert iid is not None and labels(gitlab, iid) == {MANAGED, "sync", "extra"}
    # A person adds one label and removes the managed one.
    gitlab.update_merge_request(PROJECT, iid, labels=["sync", "extra", "human"])

    newer = [{"action": "update", "file_path": "sources", "content": "v3\n"}]
    assert harness.submit(file_actions=newer, labels=[])[0] == "updated"
    wait_for(lambda: gitlab.project(PROJECT).text(BRANCH, "sources") == "v3\n", message="pushed")
    harness.settled(item_id)
    wait_for(lambda: labels(gitlab, iid) == {MANAGED, "human"}, message="labels synced")
    assert harness.item(item_id).applied_labels == [MANAGED]

    newest = [{"action": "update", "file_path": "sources", "content": "v4\n"}]
    assert harness.submit(file_actions=newest, labels=["human", "sync"])[0] == "updated"
    wait_for(lambda: gitlab.project(PROJECT).text(BRANCH, "sources") == "v4\n", message="pushed")
    harness.settled(item_id)
    wait_for(lambda: labels(gitlab, iid) == {MANAGED, "human", "sync"}, message="labels")
    # human was there before the service asked for it: it stays someone else's.
    assert harness.item(item_id).applied_labels == sorted({MANAGED, "sync"})


def test_a_new_target_branch_retargets_the_mr(harness: Harness, gitlab: FakeGitLab) -> None:
    gitlab.push(PROJECT, "release", {"RELEASE": "1.0\n"}, start="main")
    _, item_id = harness.submit()
    iid = harness.settled(item_id).mr_iid
    assert iid is not None and gitlab.merge_request(PROJECT, iid).target_branch == "main"

    # The same content for another target is an update: the branch changes with it.
    assert harness.submit(target_branch="release")[0] == "updated"
    wait_for(
        lambda: gitlab.merge_request(PROJECT, iid).target_branch == "release",
        message="retargeted",
    )
    item = harness.settled(item_id)
    assert (item.phase, item.attempts) == ("active", 0)
    project = gitlab.project(PROJECT)
    assert project.text(BRANCH, "RELEASE") == "1.0\n"  # rebuilt on the new target
    assert project.text(BRANCH, "sources") == "v2\n"
    assert gitlab.merge_request(PROJECT, iid).state == "opened"


def test_an_adopted_mr_to_another_target_is_retargeted(
    harness: Harness, gitlab: FakeGitLab
) -> None:
    gitlab.push(PROJECT, "release", {"RELEASE": "1.0\n"}, start="main")
    gitlab.push(PROJECT, BRANCH, {"sources": "stale\n"}, start="release")
    iid = open_by_hand(gitlab, target_branch="release", labels=MANAGED)

    _, item_id = harness.submit()  # wants main
    item = harness.settled(item_id)
    assert (item.phase, item.mr_iid, item.attempts) == ("active", iid, 0)
    assert gitlab.merge_request(PROJECT, iid).target_branch == "main"
    project = gitlab.project(PROJECT)
    assert project.text(BRANCH, "RELEASE") is None  # rebuilt on main
    assert project.text(BRANCH, "sources") == "v2\n"
