"""The fake GitLab refuses what GitLab refuses, through python-gitlab: branch names, repository
paths, and a second open merge request for the same branches (on create, reopen, retarget)."""

from __future__ import annotations

import pytest
from gitlab import exceptions as glexc

from tests.fakes.gitlab import FakeGitLab, testing
from tests.fakes.gitlab.testing import PATH
from tests.fakes.gitlab.testing import commit as _commit
from tests.fakes.gitlab.testing import open_mr as _open_mr

# The shared fixtures, bound here as a conftest.py would provide them.
fake_gitlab, fake, gl, project = testing.fake_gitlab, testing.fake, testing.gl, testing.project

HEX = "0123456789abcdef0123456789abcdef01234567"
NEW_FILE = {"action": "create", "file_path": "new.txt", "content": "x"}
HEX_MESSAGE = "You cannot create a branch with a 40-character hexadecimal branch name."

INVALID_BRANCHES = [
    ".hidden",
    "feature/.hidden",
    "x.lock",
    "x.lock/y",
    "HEAD",
    "refs/heads/x",
    "refs/remotes/origin/x",
    "a..b",
    "a~1",
    "a^2",
    "a:b",
    "a?",
    "a*",
    "a[1]",
    "a\\b",
    "a b",
    "a\tb",
    "a\x7fb",
    "a\x00b",
    "-x",
    "/x",
    "x/",
    "x.",
    "a@{1}",
    "a//b",
    "",
]
VALID_BRANCHES = ["@", "a@b", "x.locked", "release-1.0", "a.b/c-d_e", "refs/x", HEX[:39], "ü"]


def _branch_names(fake: FakeGitLab) -> set[str]:
    return set(fake.project(PATH).branches)


# ---------------------------------------------------------------- branch names


@pytest.mark.parametrize("name", INVALID_BRANCHES)
def test_branches_api_refuses_names_gitlab_refuses(fake: FakeGitLab, project, name: str) -> None:
    before = _branch_names(fake)

    with pytest.raises(glexc.GitlabCreateError) as err:
        project.branches.create({"branch": name, "ref": "main"})

    expected = "branch is empty" if name == "" else "Branch name is invalid"
    assert err.value.response_code == 400
    assert err.value.error_message == expected
    assert _branch_names(fake) == before


@pytest.mark.parametrize("name", INVALID_BRANCHES[:-1])  # "" is a missing parameter there
def test_commits_api_refuses_new_branch_names_gitlab_refuses(
    fake: FakeGitLab, project, name: str
) -> None:
    before = dict(fake.project(PATH).commits)
    action = {"action": "create", "file_path": "new.txt", "content": "x"}

    with pytest.raises(glexc.GitlabCreateError) as err:
        _commit(project, name, [action], start_branch="main")

    assert err.value.response_code == 400
    assert err.value.error_message == (
        f"Something went wrong when we tried to create '{name}' for you: Branch name is invalid"
    )
    assert dict(fake.project(PATH).commits) == before


@pytest.mark.parametrize("name", VALID_BRANCHES)
def test_names_gitlab_accepts_are_accepted(fake: FakeGitLab, project, name: str) -> None:
    created = project.branches.create({"branch": name, "ref": "main"})
    _commit(project, name, [{"action": "create", "file_path": "new.txt", "content": "x"}])

    assert created.name == name
    assert fake.project(PATH).text(name, "new.txt") == "x"


def test_a_40_hex_branch_name_is_refused_by_the_push_check(fake: FakeGitLab, project) -> None:
    before = dict(fake.project(PATH).commits)
    with pytest.raises(glexc.GitlabCreateError) as by_branches:
        project.branches.create({"branch": HEX, "ref": "main"})
    with pytest.raises(glexc.GitlabCreateError) as by_commits:
        _commit(project, HEX, [NEW_FILE], start_branch="main")

    assert (by_branches.value.response_code, by_branches.value.error_message) == (400, HEX_MESSAGE)
    assert (by_commits.value.response_code, by_commits.value.error_message) == (400, HEX_MESSAGE)
    assert HEX not in fake.project(PATH).branches
    assert dict(fake.project(PATH).commits) == before


def test_a_branch_cannot_be_both_a_file_and_a_directory_of_refs(fake: FakeGitLab, project) -> None:
    project.branches.create({"branch": "feature", "ref": "main"})
    project.branches.create({"branch": "topic/one", "ref": "main"})

    for name in ("feature/x", "topic"):
        with pytest.raises(glexc.GitlabCreateError) as err:
            project.branches.create({"branch": name, "ref": "main"})
        assert err.value.response_code == 400
        assert err.value.error_message == (
            f"Failed to create branch '{name}': Branch name conflicts with existing branch "
            "hierarchy."
        )
    with pytest.raises(glexc.GitlabCreateError) as err:
        _commit(project, "feature/y", [NEW_FILE], start_branch="main")
    assert err.value.response_code == 400
    assert _branch_names(fake) == {"main", "feature", "topic/one"}


def test_test_controls_refuse_what_a_git_push_would(fake: FakeGitLab) -> None:
    for name in (".hidden", "feature/.hidden", "x.lock/y", "HEAD", "refs/heads/x", HEX):
        with pytest.raises(ValueError):
            fake.push(PATH, name, {"a": "b"}, start="main")
    with pytest.raises(ValueError):
        fake.push(PATH, "ok", {"../escape": "b"}, start="main")
    with pytest.raises(ValueError):
        fake.push(PATH, "ok", {".git/config": "b"}, start="main")
    with pytest.raises(ValueError):
        fake.add_project("rpms/group/bad", default_branch="feature/.hidden")
    assert _branch_names(fake) == {"main"}


# ---------------------------------------------------------------- repository paths


@pytest.mark.parametrize(
    "path",
    ["../etc/passwd", "a/../b", "a/..", "..\\windows", "x\\..\\y", "a\nb", "/etc/passwd"],
)
def test_files_api_refuses_traversal_in_the_url_path(fake: FakeGitLab, project, path: str) -> None:
    fake.push(PATH, "main", {"b": "secret\n"})
    before = dict(fake.project(PATH).commits)
    write = {"branch": "main", "content": "x", "commit_message": "m", "file_path": path}

    with pytest.raises(glexc.GitlabGetError) as read:
        project.files.get(file_path=path, ref="main")
    with pytest.raises(glexc.GitlabCreateError) as create:
        project.files.create(write)

    for err in (read.value, create.value):
        assert err.response_code == 400
        assert err.error_message == "file_path should be a valid file path"
    assert dict(fake.project(PATH).commits) == before


def test_files_api_refuses_a_path_still_percent_encoded(fake: FakeGitLab, project) -> None:
    # python-gitlab encodes the `%`, so GitLab decodes `%2e%2e%2fx` once and finds more.
    with pytest.raises(glexc.GitlabGetError) as err:
        project.files.get(file_path="%2e%2e%2fx", ref="main")
    assert (err.value.response_code, err.value.error_message) == (
        400,
        "file_path should be a valid file path",
    )
    # /raw alone accepts a leading slash (GitLab's allow_initial_path_separator) ...
    with pytest.raises(glexc.GitlabGetError) as missing:
        project.files.raw(file_path="/kernel.spec", ref="main")
    assert missing.value.response_code == 404  # ... and then finds no such file


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("../etc/passwd", "Path cannot include directory traversal"),
        ("a/../../b", "Path cannot include directory traversal"),
        ("..", "Path cannot include directory traversal"),
        ("a//b", "invalid path: 'a//b'"),
        (".git/config", "invalid path: '.git/config'"),
        ("x/../.git/hooks/pre-receive", "invalid path: '.git/hooks/pre-receive'"),
        (".", "invalid path: '.'"),
        ("..x", "invalid path: '..x'"),
        ("", "You must provide a file path"),
    ],
)
def test_commit_actions_refuse_paths_gitaly_refuses(
    fake: FakeGitLab, project, path: str, message: str
) -> None:
    before = dict(fake.project(PATH).commits)

    with pytest.raises(glexc.GitlabCreateError) as err:
        _commit(project, "main", [{"action": "create", "file_path": path, "content": "x"}])

    assert (err.value.response_code, err.value.error_message) == (400, message)
    assert dict(fake.project(PATH).commits) == before


def test_a_move_from_outside_the_repository_is_refused(fake: FakeGitLab, project) -> None:
    move = {"action": "move", "file_path": "stolen", "previous_path": "../other/secret"}
    with pytest.raises(glexc.GitlabCreateError) as err:
        _commit(project, "main", [move])
    assert (err.value.response_code, err.value.error_message) == (
        400,
        "Path cannot include directory traversal",
    )


def test_commit_actions_clean_paths_that_stay_inside_like_gitaly(fake: FakeGitLab, project) -> None:
    _commit(
        project,
        "main",
        [
            {"action": "create", "file_path": "./docs/new", "content": "a"},
            {"action": "create", "file_path": "x/../top", "content": "b"},
        ],
    )
    tree = fake.project(PATH).tree("main")
    assert tree is not None
    assert (tree.get("docs/new"), tree.get("top")) == (b"a", b"b")
    assert not any("." in part.split("/") or ".." in part.split("/") for part in tree)


# ---------------------------------------------------------------- one open MR per branches


def _conflict(iid: int) -> list[str]:
    return [f"Another open merge request already exists for this source branch: !{iid}"]


def test_reopen_is_refused_while_another_mr_is_open_for_the_branches(
    fake: FakeGitLab, project
) -> None:
    first = _open_mr(project)
    first.state_event = "close"
    first.save()
    second = project.mergerequests.create(
        {"source_branch": "feature", "target_branch": "main", "title": "Again"}
    )

    first.state_event = "reopen"
    with pytest.raises(glexc.GitlabUpdateError) as err:
        first.save()

    assert err.value.response_code == 409
    assert err.value.error_message == _conflict(second.iid)
    assert fake.merge_request(PATH, first.iid).state == "closed"
    second.state_event = "close"
    second.save()
    first.state_event = "reopen"
    first.save()
    assert fake.merge_request(PATH, first.iid).state == "opened"


def test_retarget_is_refused_onto_branches_another_open_mr_has(fake: FakeGitLab, project) -> None:
    project.branches.create({"branch": "stable", "ref": "main"})
    first = _open_mr(project)
    # GitLab's rule is per (source, target): the same source into another target is fine.
    second = project.mergerequests.create(
        {"source_branch": "feature", "target_branch": "stable", "title": "Backport"}
    )

    second.target_branch = "main"
    with pytest.raises(glexc.GitlabUpdateError) as err:
        second.save()
    assert (err.value.response_code, err.value.error_message) == (409, _conflict(first.iid))
    assert fake.merge_request(PATH, second.iid).target_branch == "stable"

    with pytest.raises(glexc.GitlabUpdateError) as same:
        project.mergerequests.update(second.iid, {"target_branch": "feature"})
    assert (same.value.response_code, same.value.error_message) == (
        422,
        ["You can't use same project/branch for source and target"],
    )
    assert fake.merge_request(PATH, second.iid).target_branch == "stable"


def test_a_closed_mr_may_be_retargeted_but_not_reopened_into_a_clash(
    fake: FakeGitLab, project
) -> None:
    project.branches.create({"branch": "stable", "ref": "main"})
    first = _open_mr(project)
    second = project.mergerequests.create(
        {"source_branch": "feature", "target_branch": "stable", "title": "Backport"}
    )
    project.mergerequests.update(second.iid, {"state_event": "close"})

    project.mergerequests.update(second.iid, {"target_branch": "main"})
    with pytest.raises(glexc.GitlabUpdateError) as err:
        project.mergerequests.update(second.iid, {"state_event": "reopen"})

    assert (err.value.response_code, err.value.error_message) == (409, _conflict(first.iid))
    assert fake.merge_request(PATH, second.iid).state == "closed"


def test_reopen_without_the_source_branch_leaves_the_mr_closed(fake: FakeGitLab, project) -> None:
    mr = _open_mr(project)
    project.mergerequests.update(mr.iid, {"state_event": "close"})
    project.branches.delete("feature")

    answer = project.mergerequests.update(mr.iid, {"state_event": "reopen"})

    assert answer["state"] == "closed"  # GitLab's ReopenService does nothing, silently
    assert fake.merge_request(PATH, mr.iid).state == "closed"


def test_the_web_ui_control_refuses_the_same_clashes(fake: FakeGitLab, project) -> None:
    first = _open_mr(project)
    project.mergerequests.update(first.iid, {"state_event": "close"})
    project.mergerequests.create(
        {"source_branch": "feature", "target_branch": "main", "title": "Again"}
    )

    with pytest.raises(ValueError, match="Another open merge request already exists"):
        fake.update_merge_request(PATH, first.iid, state="opened")
    assert fake.merge_request(PATH, first.iid).state == "closed"
