"""python-gitlab, unchanged, against the fake GitLab: proves the fake is good enough to
stand in for GitLab in the `mr` type's tests (and the later CI-retry work). Projects,
branches, files, commits, auth, failure injection; MRs and CI are in test_fake_gitlab_mrs.py,
GitLab's refusals of names and paths in test_fake_gitlab_rules.py."""

from __future__ import annotations

import threading
import time

import gitlab
import pytest
import requests
from gitlab import exceptions as glexc

from tests.fakes.gitlab import FakeGitLab, testing
from tests.fakes.gitlab.testing import PATH, TOKEN
from tests.fakes.gitlab.testing import commit as _commit
from tests.fakes.gitlab.testing import open_mr as _open_mr

# The shared fixtures, bound here as a conftest.py would provide them.
fake_gitlab, fake, gl, project = testing.fake_gitlab, testing.fake, testing.gl, testing.project

# ---------------------------------------------------------------- projects, branches, files


def test_project_by_id_and_by_encoded_path(fake: FakeGitLab, gl: gitlab.Gitlab) -> None:
    by_path = gl.projects.get(PATH)
    by_id = gl.projects.get(by_path.id)

    assert by_id.path_with_namespace == PATH
    assert by_path.default_branch == "main"
    assert by_path.web_url == f"{fake.url}/{PATH}"
    assert fake.requests_to("GET", r"/projects/rpms%2Fgroup%2Fkernel$")


def test_branches_create_list_get_delete(fake: FakeGitLab, project) -> None:
    created = project.branches.create({"branch": "feature/one", "ref": "main"})
    assert created.commit["id"] == fake.project(PATH).branches["main"]

    assert project.branches.get("feature/one").name == "feature/one"
    assert {b.name for b in project.branches.list(get_all=True)} == {"main", "feature/one"}

    with pytest.raises(glexc.GitlabCreateError) as exists:
        project.branches.create({"branch": "feature/one", "ref": "main"})
    assert exists.value.response_code == 400
    assert exists.value.error_message == "Branch already exists"
    with pytest.raises(glexc.GitlabCreateError) as bad_ref:
        project.branches.create({"branch": "other", "ref": "nope"})
    assert "invalid reference name 'nope'" in bad_ref.value.error_message

    project.branches.delete("feature/one")
    assert "feature/one" not in fake.project(PATH).branches
    with pytest.raises(glexc.GitlabGetError) as missing:
        project.branches.get("feature/one")
    assert missing.value.response_code == 404
    assert missing.value.error_message == "404 Branch Not Found"


def test_commit_with_actions_then_read_files_back(fake: FakeGitLab, project) -> None:
    main_head = fake.project(PATH).branches["main"]
    commit = _commit(
        project,
        "feature",
        [
            {"action": "update", "file_path": "kernel.spec", "content": "Version: 2\n"},
            {"action": "create", "file_path": "patches/a b.patch", "content": "cGF0Y2gK",
             "encoding": "base64"},
            {"action": "move", "file_path": "docs/README.md", "previous_path": "docs/README"},
            {"action": "create", "file_path": "tmp.txt", "content": "x"},
            {"action": "delete", "file_path": "tmp.txt"},
        ],
        start_branch="main",
    )  # fmt: skip

    assert commit.parent_ids == [main_head]
    assert commit.title == "change feature"
    state = fake.project(PATH)
    assert state.branches["feature"] == commit.id
    assert state.tree("feature") == {
        "kernel.spec": b"Version: 2\n",
        "patches/a b.patch": b"patch\n",
        "docs/README.md": b"hi\n",
    }
    assert state.text("main", "kernel.spec") == "Version: 1\n"  # main untouched

    spec = project.files.get(file_path="patches/a b.patch", ref="feature")
    assert spec.decode() == b"patch\n"
    assert spec.file_path == "patches/a b.patch"
    assert spec.last_commit_id == commit.id
    assert project.files.raw("kernel.spec", ref="feature") == b"Version: 2\n"
    assert project.files.head("kernel.spec", ref="feature")["X-Gitlab-Commit-Id"] == commit.id
    assert project.commits.get(commit.id).stats["total"] == 3

    with pytest.raises(glexc.GitlabGetError) as missing:
        project.files.get(file_path="docs/README", ref="feature")
    assert (missing.value.response_code, missing.value.error_message) == (
        404,
        "404 File Not Found",
    )


def test_files_api_and_tree(fake: FakeGitLab, project) -> None:
    project.files.create(
        {"file_path": "a/b.txt", "branch": "main", "content": "b", "commit_message": "add"}
    )
    tree = project.repository_tree(ref="main", recursive=True, get_all=True)

    assert {(e["path"], e["type"]) for e in tree} == {
        ("a", "tree"),
        ("a/b.txt", "blob"),
        ("docs", "tree"),
        ("docs/README", "blob"),
        ("kernel.spec", "blob"),
    }
    assert fake.project(PATH).text("main", "a/b.txt") == "b"


@pytest.mark.parametrize(
    ("actions", "extra", "message"),
    [
        (
            [{"action": "create", "file_path": "kernel.spec", "content": "x"}],
            {},
            "A file with this name already exists",
        ),
        (
            [{"action": "update", "file_path": "missing", "content": "x"}],
            {},
            "A file with this name doesn't exist",
        ),
        ([{"action": "delete", "file_path": "missing"}], {}, "A file with this name doesn't exist"),
        (
            [{"action": "move", "file_path": "x", "previous_path": "missing"}],
            {},
            "A file with this name doesn't exist",
        ),
        (
            [{"action": "create", "file_path": "docs", "content": "x"}],
            {},
            "A directory with this name already exists",
        ),
        (
            [{"action": "create", "file_path": "../etc/passwd", "content": "x"}],
            {},
            "Path cannot include directory traversal",
        ),
        (
            [{"action": "create", "file_path": "new", "content": "x"}],
            {"branch": "nowhere"},
            "You can only create or edit files when you are on a branch",
        ),
        (
            [{"action": "create", "file_path": "new", "content": "x"}],
            {"branch": "existing", "start_branch": "main"},
            "A branch called 'existing' already exists. Switch to that branch in order to make "
            "changes",
        ),
        (
            [{"action": "rename", "file_path": "new"}],
            {},
            "actions[0][action] does not have a valid value",
        ),
    ],
)
def test_commit_errors_like_gitlab(fake: FakeGitLab, project, actions, extra, message) -> None:
    project.branches.create({"branch": "existing", "ref": "main"})
    before = dict(fake.project(PATH).branches)
    data = {"branch": "main", "commit_message": "m", "actions": actions, **extra}

    with pytest.raises(glexc.GitlabCreateError) as err:
        project.commits.create(data)

    assert err.value.response_code == 400
    assert err.value.error_message == message
    assert fake.project(PATH).branches == before  # nothing half-applied


def test_compare_shows_diffs_and_commits(fake: FakeGitLab, project) -> None:
    first = _commit(
        project,
        "feature",
        [{"action": "update", "file_path": "kernel.spec", "content": "Version: 2\n"}],
        start_branch="main",
    )
    second = _commit(project, "feature", [{"action": "delete", "file_path": "docs/README"}])
    fake.push(PATH, "main", {"unrelated.txt": "main moved on\n"})

    result = project.repository_compare("main", "feature")

    assert [c["id"] for c in result["commits"]] == [first.id, second.id]
    assert result["commit"]["id"] == second.id
    diffs = {d["new_path"]: d for d in result["diffs"]}
    assert set(diffs) == {"kernel.spec", "docs/README"}  # from the merge base, not main's tip
    assert diffs["kernel.spec"]["diff"] == "@@ -1 +1 @@\n-Version: 1\n+Version: 2\n"
    assert diffs["docs/README"]["deleted_file"] is True
    straight = project.repository_compare("main", "feature", straight=True)
    assert "unrelated.txt" in {d["old_path"] for d in straight["diffs"]}
    same = project.repository_compare("main", "main")
    assert same["compare_same_ref"] is True
    assert same["diffs"] == []
    assert same["commits"] == []


def test_force_push_replaces_the_branch_with_start_branch_plus_actions(
    fake: FakeGitLab, project
) -> None:
    mr = _open_mr(project)
    fake.push(PATH, "main", {"upstream.txt": "new upstream file\n"})
    main_head = fake.project(PATH).branches["main"]

    forced = _commit(
        project,
        "feature",
        [{"action": "create", "file_path": "only-this.txt", "content": "v2\n"}],
        start_branch="main",
        force=True,
    )

    state = fake.project(PATH)
    assert forced.parent_ids == [main_head]
    assert state.tree("feature") == {**state.tree("main"), "only-this.txt": b"v2\n"}
    refreshed = project.mergerequests.get(mr.iid)
    assert refreshed.sha == forced.id
    assert refreshed.changes_count == "1"
    assert [d["new_path"] for d in project.repository_compare("main", "feature")["diffs"]] == [
        "only-this.txt"
    ]
    assert any(n.system and n.body.startswith("added 1 commit") for n in refreshed.notes.list())


# ---------------------------------------------------------------- auth and errors


def test_authentication_and_access_errors(fake: FakeGitLab) -> None:
    fake.add_project("other/project")
    fake.add_token("glpat-read", projects=[PATH], access="read")

    for token in (None, "glpat-wrong"):
        with pytest.raises(glexc.GitlabAuthenticationError) as unauthorized:
            gitlab.Gitlab(fake.url, private_token=token).projects.get(PATH)
        assert unauthorized.value.response_code == 401
        assert unauthorized.value.error_message == "401 Unauthorized"

    scoped = gitlab.Gitlab(fake.url, private_token=TOKEN)
    for ref in ("other/project", "does/not/exist"):
        with pytest.raises(glexc.GitlabGetError) as not_found:
            scoped.projects.get(ref)
        assert (not_found.value.response_code, not_found.value.error_message) == (
            404,
            "404 Project Not Found",
        )
    with pytest.raises(glexc.GitlabGetError) as missing_mr:
        scoped.projects.get(PATH).mergerequests.get(42)
    assert missing_mr.value.response_code == 404

    reader = gitlab.Gitlab(fake.url, private_token="glpat-read").projects.get(PATH)
    with pytest.raises(glexc.GitlabCreateError) as forbidden:
        reader.branches.create({"branch": "x", "ref": "main"})
    assert forbidden.value.response_code == 403


def test_empty_repository_changes_and_unknown_routes(fake: FakeGitLab, gl: gitlab.Gitlab) -> None:
    fake.add_project("rpms/group/new", empty=True)
    empty = gl.projects.get("rpms/group/new")
    assert (empty.empty_repo, empty.default_branch) == (True, None)

    first = _commit(empty, "main", [{"action": "create", "file_path": "a", "content": "a\n"}])
    _commit(
        empty,
        "topic",
        [{"action": "create", "file_path": "b", "content": "b"}],
        start_branch="main",
    )
    mr = empty.mergerequests.create(
        {"source_branch": "topic", "target_branch": "main", "title": "b"}
    )

    assert first.parent_ids == []
    changes = mr.changes()["changes"]
    assert [(c["new_path"], c["new_file"]) for c in changes] == [("b", True)]
    assert changes[0]["diff"] == "@@ -0,0 +1 @@\n+b\n\\ No newline at end of file\n"
    with pytest.raises(glexc.GitlabHttpError) as unknown:
        gl.http_get("/projects/rpms%2Fgroup%2Fnew/no_such_thing")
    assert unknown.value.response_code == 404


def test_request_log_redacts_the_token(fake: FakeGitLab, project) -> None:
    project.mergerequests.list(state="opened", labels="a,b", get_all=True)

    entry = fake.requests_to("GET", r"/merge_requests$")[-1]
    assert entry.headers["PRIVATE-TOKEN"] == "[redacted]"
    assert TOKEN not in repr(fake.requests)
    assert entry.query["labels"] == "a,b"
    assert entry.status == 200
    created = _open_mr(project)
    post = fake.requests_to("POST", r"/merge_requests$")[-1]
    assert post.json["source_branch"] == "feature"
    assert created.iid == 1


# ---------------------------------------------------------------- failure injection


def test_injected_500_is_raised_or_retried(fake: FakeGitLab, gl: gitlab.Gitlab) -> None:
    fake.fail_next("GET", r"/projects/[^/]+$", 500)
    with pytest.raises(glexc.GitlabGetError) as err:
        gl.projects.get(PATH)
    assert err.value.response_code == 500

    fake.fail_next("GET", r"/projects/[^/]+$", 401)
    with pytest.raises(glexc.GitlabAuthenticationError):
        gl.projects.get(PATH)
    fake.fail_next("GET", r"/projects/[^/]+$", 403)
    with pytest.raises(glexc.GitlabGetError) as forbidden:
        gl.projects.get(PATH)
    assert forbidden.value.response_code == 403

    fake.fail_next("GET", r"/projects/[^/]+$", 502, times=2)
    retrying = gitlab.Gitlab(fake.url, private_token=TOKEN, retry_transient_errors=True)
    assert retrying.projects.get(PATH).path_with_namespace == PATH
    statuses = [r.status for r in fake.requests_to("GET", r"/projects/[^/]+$")]
    assert statuses == [500, 401, 403, 502, 502, 200]
    assert [r.injected for r in fake.requests_to("GET")] == [True] * 5 + [False]


def test_injected_429_honours_retry_after(fake: FakeGitLab, gl: gitlab.Gitlab) -> None:
    fake.fail_next("GET", r"/projects/[^/]+$", 429, retry_after=1)

    started = time.monotonic()
    project = gl.projects.get(PATH)

    assert time.monotonic() - started >= 1.0  # python-gitlab slept for Retry-After
    assert project.id == fake.project(PATH).id
    assert [r.status for r in fake.requests_to("GET")] == [429, 200]

    fake.fail_next(None, r"/merge_requests", 429, times=None)
    impatient = gitlab.Gitlab(fake.url, private_token=TOKEN, timeout=5)
    with pytest.raises(glexc.GitlabListError) as limited:
        impatient.projects.get(PATH, lazy=True).mergerequests.list(obey_rate_limit=False)
    assert limited.value.response_code == 429
    fake.clear_faults()


def test_latency_and_dropped_connections(fake: FakeGitLab) -> None:
    fake.add_latency("GET", r"/projects/[^/]+$", 0.3, times=1)
    with pytest.raises(requests.exceptions.Timeout):
        gitlab.Gitlab(fake.url, private_token=TOKEN, timeout=0.1).projects.get(PATH)

    fake.drop_next("GET", r"/projects/[^/]+$")
    with pytest.raises(requests.exceptions.ConnectionError):
        gitlab.Gitlab(fake.url, private_token=TOKEN).projects.get(PATH)
    fake.drop_next("GET", r"/projects/[^/]+$")
    retrying = gitlab.Gitlab(fake.url, private_token=TOKEN, retry_transient_errors=True)
    assert retrying.projects.get(PATH).id == fake.project(PATH).id


def test_stop_and_restart_on_the_same_port(fake: FakeGitLab, gl: gitlab.Gitlab) -> None:
    gl.projects.get(PATH)
    url = fake.url

    fake.stop()
    with pytest.raises(requests.exceptions.ConnectionError):
        gl.projects.get(PATH)
    fake.start()

    assert fake.url == url
    assert gl.projects.get(PATH).id == fake.project(PATH).id


def test_concurrent_writers(fake: FakeGitLab) -> None:
    errors: list[BaseException] = []

    def worker(index: int) -> None:
        try:
            client = gitlab.Gitlab(fake.url, private_token=TOKEN)
            project = client.projects.get(PATH, lazy=True)
            _open_mr(project, f"concurrent-{index}")
        except BaseException as err:
            errors.append(err)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    state = fake.project(PATH)
    assert sorted(state.merge_requests) == list(range(1, 9))
    assert {mr.source_branch for mr in state.merge_requests.values()} == {
        f"concurrent-{i}" for i in range(8)
    }
