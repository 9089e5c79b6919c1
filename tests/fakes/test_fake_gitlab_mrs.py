"""python-gitlab against the fake GitLab: merge requests, notes, pipelines and jobs."""

from __future__ import annotations

import pytest
from gitlab import exceptions as glexc

from tests.fakes.gitlab import FakeGitLab, testing
from tests.fakes.gitlab.testing import PATH
from tests.fakes.gitlab.testing import commit as _commit
from tests.fakes.gitlab.testing import open_mr as _open_mr

# The shared fixtures, bound here as a conftest.py would provide them.
fake_gitlab, fake, gl, project = testing.fake_gitlab, testing.fake, testing.gl, testing.project

# ---------------------------------------------------------------- merge requests


@pytest.mark.parametrize(
    ("title", "draft"),
    [
        ("Draft: bump", True),
        ("draft:bump", True),
        ("[Draft] bump", True),
        ("(draft) bump", True),
        ("Drafted bump", False),
        ("bump (Draft)", False),
        (" Draft: bump", False),
    ],
)
def test_draft_is_derived_from_the_title(project, title: str, draft: bool) -> None:
    mr = _open_mr(project, title=title)

    assert mr.draft is draft
    assert mr.work_in_progress is draft
    assert mr.detailed_merge_status == ("draft_status" if draft else "mergeable")


def test_merge_request_lifecycle(fake: FakeGitLab, project) -> None:
    mr = _open_mr(
        project,
        title="Draft: Bump kernel",
        description="Automated",
        labels="managed-by::workqueue,rpms",
        remove_source_branch=True,
    )

    assert mr.iid == 1
    assert mr.id != mr.iid
    assert mr.state == "opened"
    assert mr.draft is True
    assert mr.labels == ["managed-by::workqueue", "rpms"]
    assert mr.web_url == f"{fake.url}/{PATH}/-/merge_requests/1"
    assert mr.sha == fake.project(PATH).branches["feature"]
    assert mr.changes_count == "1"
    assert mr.head_pipeline is None

    mr.title = "Bump kernel"
    mr.description = "Automated, v2"
    mr.save()
    assert (mr.draft, mr.detailed_merge_status) == (False, "mergeable")
    updated = project.mergerequests.update(mr.iid, {"add_labels": "extra", "remove_labels": "rpms"})
    assert updated["labels"] == ["extra", "managed-by::workqueue"]
    mr = project.mergerequests.get(mr.iid)
    mr.labels = ["a", "managed-by::workqueue"]
    mr.save()
    assert fake.merge_request(PATH, 1).labels == ["a", "managed-by::workqueue"]

    mr.state_event = "close"
    mr.save()
    assert (mr.state, mr.detailed_merge_status) == ("closed", "not_open")
    with pytest.raises(glexc.GitlabMRClosedError) as closed:
        mr.merge()
    assert closed.value.response_code == 405
    mr.state_event = "reopen"
    mr.save()
    assert mr.state == "opened"

    mr.merge()
    assert mr.state == "merged"
    state = fake.project(PATH)
    assert state.text("main", "kernel.spec") == "Version: 2\n"
    assert state.commits[state.branches["main"]].parent_ids[1] == mr.sha
    assert mr.merge_commit_sha == state.branches["main"]
    assert "feature" not in state.branches  # remove_source_branch was asked for
    system = [n.body.split("\n")[0] for n in fake.merge_request(PATH, 1).notes if n.system]
    assert [b for b in system if b in ("closed", "reopened", "merged")] == [
        "closed",
        "reopened",
        "merged",
    ]


def test_merge_refusals(fake: FakeGitLab, project) -> None:
    mr = _open_mr(project, title="[Draft] wip")
    with pytest.raises(glexc.GitlabMRClosedError) as draft:
        mr.merge()
    assert draft.value.response_code == 405

    mr.title = "ready"
    mr.save()
    fake.set_merge_status(PATH, mr.iid, "ci_must_pass")
    assert project.mergerequests.get(mr.iid).detailed_merge_status == "ci_must_pass"
    with pytest.raises(glexc.GitlabMRClosedError):
        mr.merge()
    fake.set_merge_status(PATH, mr.iid, None)

    with pytest.raises(glexc.GitlabMRClosedError) as wrong_sha:
        mr.merge(sha="0" * 40)
    assert wrong_sha.value.response_code == 409

    fake.push(PATH, "main", {"kernel.spec": "Version: 3\n"})  # conflicts with the MR
    conflicted = project.mergerequests.get(mr.iid)
    assert (conflicted.detailed_merge_status, conflicted.has_conflicts) == ("conflict", True)
    with pytest.raises(glexc.GitlabMRClosedError) as conflict:
        mr.merge()
    assert (conflict.value.response_code, conflict.value.error_message) == (
        422,
        "Branch cannot be merged",
    )

    with pytest.raises(glexc.GitlabCreateError) as duplicate:
        project.mergerequests.create(
            {"source_branch": "feature", "target_branch": "main", "title": "again"}
        )
    assert duplicate.value.response_code == 409
    assert duplicate.value.error_message == [
        "Another open merge request already exists for this source branch: !1"
    ]


def test_list_merge_requests_with_filters_and_pagination(fake: FakeGitLab, project) -> None:
    for index in range(5):
        _open_mr(project, f"branch-{index}", labels=["even" if index % 2 == 0 else "odd"])
    project.mergerequests.update(2, {"state_event": "close"})

    by_branch = project.mergerequests.list(source_branch="branch-3", get_all=True)
    opened = project.mergerequests.list(state="opened", get_all=True)
    even = project.mergerequests.list(labels=["even"], state="opened", get_all=True)
    paged = list(project.mergerequests.list(iterator=True, per_page=2))

    assert [mr.iid for mr in by_branch] == [4]
    assert sorted(mr.iid for mr in opened) == [1, 3, 4, 5]
    assert sorted(mr.iid for mr in even) == [1, 3, 5]
    assert [mr.iid for mr in paged] == [5, 4, 3, 2, 1]
    pages = fake.requests_to("GET", r"/merge_requests$")[-3:]
    assert [r.query.get("page") for r in pages] == [None, "2", "3"]
    assert len(project.mergerequests.list(per_page=2, page=1)) == 2
    assert not hasattr(by_branch[0], "head_pipeline")  # list entries are MergeRequestBasic


def test_internal_notes(fake: FakeGitLab, project) -> None:
    mr = _open_mr(project)

    note = mr.notes.create({"body": "Dashboard: https://dash/1", "internal": True})
    public = mr.notes.create({"body": "hello"})
    note.body = "Dashboard: https://dash/2"
    note.save()

    assert note.internal is True
    assert public.internal is False
    assert mr.notes.get(note.id).body == "Dashboard: https://dash/2"
    listed = [n for n in mr.notes.list(get_all=True) if not n.system]
    assert [n.id for n in listed] == [public.id, note.id]  # newest first, like GitLab
    stored = fake.merge_request(PATH, mr.iid).user_notes()
    assert [(n.body, n.internal) for n in stored] == [
        ("Dashboard: https://dash/2", True),
        ("hello", False),
    ]
    with pytest.raises(glexc.GitlabGetError) as missing:
        mr.notes.get(1)
    assert missing.value.error_message == "404 Note Not Found"


# ---------------------------------------------------------------- pipelines and jobs


def test_pipelines_jobs_trace_and_retry(fake: FakeGitLab, project) -> None:
    mr = _open_mr(project)
    pipeline = fake.add_pipeline(
        PATH,
        "feature",
        jobs=[
            "build",
            {
                "name": "test",
                "status": "failed",
                "trace": "fatal: unable to access 'https://x/'\n",
                "failure_reason": "script_failure",
            },
        ],
    )

    head = project.mergerequests.get(mr.iid).head_pipeline
    assert (head["id"], head["status"]) == (pipeline.id, "failed")
    listed = project.pipelines.list(ref="feature", get_all=True)
    assert [p.id for p in listed] == [pipeline.id]
    jobs = {job.name: job for job in project.pipelines.get(pipeline.id).jobs.list(get_all=True)}
    failed = project.jobs.get(jobs["test"].id)
    assert failed.failure_reason == "script_failure"
    assert failed.pipeline["id"] == pipeline.id
    assert failed.trace() == b"fatal: unable to access 'https://x/'\n"

    retried = failed.retry()

    assert retried["name"] == "test"
    assert retried["id"] != failed.id
    assert retried["status"] == "pending"
    assert retried["pipeline"]["id"] == pipeline.id
    assert fake.pipeline_status(PATH, pipeline.id) == "running"
    latest = project.pipelines.get(pipeline.id).jobs.list(get_all=True)
    everything = project.pipelines.get(pipeline.id).jobs.list(include_retried=True, get_all=True)
    assert sorted(j.id for j in latest) == sorted([jobs["build"].id, retried["id"]])
    assert len(everything) == 3
    with pytest.raises(glexc.GitlabJobRetryError) as again:
        failed.retry()
    assert (again.value.response_code, again.value.error_message) == (
        403,
        "403 Forbidden - Job is not retryable",
    )

    fake.set_job(PATH, retried["id"], status="success", trace="ok\n")
    assert project.pipelines.get(pipeline.id).status == "success"
    assert project.jobs.get(retried["id"]).trace() == b"ok\n"


def test_job_lists_are_newest_first_and_scopes_are_checked(fake: FakeGitLab, project) -> None:
    _open_mr(project)
    pipeline = fake.add_pipeline(
        PATH, "feature", jobs=["build", {"name": "test", "status": "failed"}, "lint"]
    )
    jobs = project.pipelines.get(pipeline.id, lazy=True).jobs
    listed = jobs.list(get_all=True)
    assert [job.id for job in listed] == sorted(pipeline.job_ids, reverse=True)
    assert [job.name for job in jobs.list(scope="failed", get_all=True)] == ["test"]
    both = jobs.list(scope=["failed", "success"], get_all=True)
    assert len(both) == 3
    assert all(not hasattr(job, "failure_reason") for job in both if job.status != "failed")
    for bad in ("finished", ["failed", "broken"]):
        with pytest.raises(glexc.GitlabListError) as err:
            jobs.list(scope=bad, get_all=True)
        assert err.value.response_code == 400
        assert "scope does not have a valid value" in err.value.error_message
    with pytest.raises(glexc.GitlabListError) as missing:
        project.pipelines.get(999999, lazy=True).jobs.list(get_all=True)
    assert missing.value.response_code == 404


def test_trace_and_retry_of_unknown_or_unretryable_jobs(fake: FakeGitLab, project, gl) -> None:
    _open_mr(project)
    pipeline = fake.add_pipeline(
        PATH, "feature", jobs=[{"name": "test", "status": "running", "trace": "step 1\n"}]
    )
    job = project.jobs.get(pipeline.job_ids[0], lazy=True)
    response = gl.http_get(f"/projects/{project.id}/jobs/{job.id}/trace", raw=True)
    assert response.headers["Content-Type"].startswith("text/plain")
    assert response.headers["Content-Disposition"] == f'infile; filename="{job.id}.log"'
    chunks = b"".join(job.trace(streamed=True, iterator=True, chunk_size=3))
    assert chunks == b"step 1\n"
    with pytest.raises(glexc.GitlabJobRetryError) as running:
        job.retry()  # a running job is not retryable
    assert running.value.response_code == 403
    gone = project.jobs.get(424242, lazy=True)
    with pytest.raises(glexc.GitlabGetError) as no_trace:
        gone.trace()
    with pytest.raises(glexc.GitlabJobRetryError) as no_retry:
        gone.retry()
    assert no_trace.value.response_code == no_retry.value.response_code == 404
    fake.set_job(PATH, job.id, status="failed")
    fake.add_token("glpat-reader", projects=[PATH], access="read")
    reader = type(gl)(fake.url, private_token="glpat-reader", timeout=5)
    with pytest.raises(glexc.GitlabJobRetryError) as read_only:
        reader.projects.get(PATH, lazy=True).jobs.get(job.id, lazy=True).retry()
    assert read_only.value.response_code == 403
    assert len(fake.jobs(PATH, pipeline.id)) == 1  # nothing was retried


def test_head_pipeline_follows_the_source_branch_head(fake: FakeGitLab, project) -> None:
    mr = _open_mr(project)
    fake.add_pipeline(PATH, "feature", status="success")
    assert project.mergerequests.get(mr.iid).head_pipeline["status"] == "success"

    _commit(project, "feature", [{"action": "create", "file_path": "n", "content": "n"}])

    assert project.mergerequests.get(mr.iid).head_pipeline is None


def test_merge_when_pipeline_succeeds(fake: FakeGitLab, project) -> None:
    mr = _open_mr(project)
    pipeline = fake.add_pipeline(PATH, "feature", jobs=[{"name": "test", "status": "running"}])

    mr.merge(merge_when_pipeline_succeeds=True)
    assert (mr.state, mr.merge_when_pipeline_succeeds) == ("opened", True)

    fake.set_job(PATH, pipeline.job_ids[0], status="success")
    assert project.mergerequests.get(mr.iid).state == "merged"
