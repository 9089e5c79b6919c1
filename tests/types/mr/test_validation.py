"""Submissions the API must refuse with a 422 that names the field, storing nothing:
bad repository paths and branch names, NUL, over-long values, loose booleans and the
configured per-item limits. Also the near misses that must still be accepted.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from tests.conftest import Store
from tests.types.mr.helpers import mr_api, payload
from wq.daemon.runtime import Runtime
from wq.engine.models import WorkItem

URL = "/api/work-items/mr"
LIMITS = {"max_file_actions": 3, "max_file_bytes": 10, "max_labels": 2}


def _update(path: str) -> dict[str, Any]:
    return {"action": "update", "file_path": path, "content": "x"}


def _files(*actions: dict[str, Any]) -> dict[str, Any]:
    return {"file_actions": list(actions)}


BAD_PATHS = [
    "../etc/passwd",
    "a/../../b",
    "..",
    ".",
    "./x",
    "a/./b",
    "a//b",
    "a/",
    "/etc/passwd",
    ".git/config",
    "sub/.git/hooks/pre-commit",
    ".GIT/config",
    ".git./config",
    "git~1/config",
    "..\\windows",
    "a\\b",
    "a\x01b",
    "x" * 4097,
]
BAD_BRANCHES = [
    "a..b",
    "..",
    "a~1",
    "a^2",
    "a:b",
    "a?",
    "a*",
    "a[b",
    "a\\b",
    "a b",
    "a\tb",
    "a\x7fb",
    "-flag",
    "/lead",
    "trail/",
    "a//b",
    "x.lock",
    "x.lock/y",
    "a@{1}",
    "@",
    "trail.",
    ".hidden",
    "feature/.hidden",
    "HEAD",
    "refs/heads/x",
    "b" * 256,
]
# (overrides, the field the message must name)
REFUSED: list[tuple[dict[str, Any], str]] = [
    *[(_files(_update(path)), "file_actions.0.update.file_path") for path in BAD_PATHS],
    (
        _files({"action": "move", "file_path": "b", "previous_path": "../x"}),
        "file_actions.0.move.previous_path",
    ),
    (
        _files({"action": "move", "file_path": "b", "previous_path": ".git/HEAD"}),
        "file_actions.0.move.previous_path",
    ),
    *[({"source_branch": name}, "source_branch") for name in BAD_BRANCHES],
    *[({"target_branch": name}, "target_branch") for name in BAD_BRANCHES],
    ({"target_branch": "refs/heads/main"}, "target_branch"),
    # NUL in every string field
    *[
        ({field: "a\x00b"}, field)
        for field in (
            "project",
            "source_branch",
            "target_branch",
            "title",
            "description",
            "commit_message",
            "package",
            "source",
            "change_kind",
        )
    ],
    ({"labels": ["a\x00b"]}, "labels.0"),
    (_files(_update("a\x00b")), "file_actions.0.update.file_path"),
    (_files({"action": "update", "file_path": "a", "content": "x\x00y"}), "content"),
    # longer than their columns (or GitLab's limits)
    ({"package": "p" * 256}, "package"),
    ({"source": "s" * 256}, "source"),
    ({"change_kind": "c" * 65}, "change_kind"),
    ({"title": "t" * 249}, "title"),
    ({"project": "group/" + "p" * 235}, "project"),
    ({"labels": ["l" * 256]}, "labels.0"),
    ({"description": "d" * (1_048_576 + 1)}, "description"),
    ({"commit_message": "m" * (1_048_576 + 1)}, "commit_message"),
    ({"target_branch": "t" * 256}, "target_branch"),
    (_files({"action": "move", "file_path": "b", "previous_path": "p" * 4097}), "previous_path"),
    # projects that are not paths, labels GitLab would split or drop
    ({"project": "group/../other"}, "project"),
    ({"project": "group//project"}, "project"),
    ({"labels": ["a,b"]}, "labels.0"),
    ({"labels": [" "]}, "labels.0"),
    # strict booleans
    ({"draft": "yes"}, "draft"),
    ({"draft": "true"}, "draft"),
    ({"draft": 1}, "draft"),
    ({"auto_merge": "no"}, "auto_merge"),
    ({"auto_merge": 0}, "auto_merge"),
    # the configured per-item limits, each message says the limit
    (_files(*[_update(f"f{n}") for n in range(4)]), "at most 3"),
    ({"labels": ["a", "b", "c"]}, "at most 2"),
    (_files({"action": "create", "file_path": "big", "content": "x" * 11}), "10 bytes"),
    (
        _files({"action": "create", "file_path": "big", "content": "eHh4eHh4eHh4eHg="}),
        "10 bytes",
    ),  # 11 bytes once decoded
    # one path, two actions: GitLab refused the commit once the item ran (400)
    (
        _files(
            {"action": "create", "file_path": "y", "content": "1"},
            {"action": "create", "file_path": "y", "content": "2"},
        ),
        "y is the file_path of two actions",
    ),
    (_files(_update("a/b"), {"action": "delete", "file_path": "a/b"}), "a/b is the file_path"),
    # a move to its own path (no change a commit can hold) was accepted
    (
        _files({"action": "move", "file_path": "a/b", "previous_path": "a/b"}),
        "a/b is moved to itself",
    ),
]
ACCEPTED: list[dict[str, Any]] = [
    _files(_update(".gitignore"), _update(".github/workflows/ci.yml"), _update("a/b.c/d")),
    _files({"action": "move", "file_path": "new/name", "previous_path": "old/name"}),
    # a file moved away and another made in its place
    _files(
        {"action": "move", "file_path": "new/name", "previous_path": "old/name"},
        {"action": "create", "file_path": "old/name", "content": "x"},
    ),
    _files(
        {"action": "update", "file_path": "a", "content": "x", "previous_path": None},
        {"action": "delete", "file_path": "README.md", "content": None, "previous_path": None},
    ),
    {"source_branch": "feature/x.y-z_1", "target_branch": "release/1.0"},
    {"source_branch": "wq/ünïcode", "labels": ["managed-by::other", "a b"]},
    {"source_branch": "b" * 255, "project": "group/" + "p" * 234},
    _files({"action": "create", "file_path": "ten", "content": "x" * 10}),
    {"draft": True, "auto_merge": False, "title": "t" * 248},
]


@pytest.fixture
def api(store: Store, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Runtime, TestClient]]:
    """The daemon's app on the test database, with small per-item limits."""
    with mr_api(store, monkeypatch, **LIMITS) as made:
        yield made


def _count(runtime: Runtime) -> int:
    with runtime.sessions() as session:
        return session.execute(select(func.count()).select_from(WorkItem)).scalar_one()


def test_bad_submissions_are_422_naming_the_field_and_store_nothing(
    api: tuple[Runtime, TestClient],
) -> None:
    runtime, client = api
    wrong = []
    for overrides, named in REFUSED:
        response = client.post(URL, json=payload(**overrides))
        if response.status_code != 422 or named not in response.json().get("error", ""):
            wrong.append((overrides, response.status_code, response.text[:300]))
    assert wrong == []
    assert _count(runtime) == 0


def test_near_misses_are_accepted(api: tuple[Runtime, TestClient]) -> None:
    runtime, client = api
    for number, overrides in enumerate(ACCEPTED):
        overrides.setdefault("source_branch", f"wq/accepted-{number}")
        response = client.post(URL, json=payload(**overrides))
        assert response.status_code == 201, (overrides, response.text)
    assert _count(runtime) == len(ACCEPTED)


def test_the_limits_are_in_the_openapi_document(api: tuple[Runtime, TestClient]) -> None:
    _, client = api
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    mr = schemas["MrCreate"]["properties"]
    assert mr["file_actions"]["maxItems"] == 3 and mr["labels"]["maxItems"] == 2
    assert "10 bytes" in mr["file_actions"]["description"]
    assert (
        mr["source_branch"]["maxLength"] == 255 and mr["change_kind"]["anyOf"][0]["maxLength"] == 64
    )
    assert mr["project"]["maxLength"] + mr["source_branch"]["maxLength"] + 15 <= 512
    assert mr["description"]["pattern"] == "^[^\\x00]*$"
    assert mr["draft"]["type"] == "boolean"
    action = schemas["UpdateAction"]["properties"]
    assert action["file_path"]["maxLength"] == 4096 and ".." in action["file_path"]["description"]
    # What each action needs is in the schema, not only in the server's checks.
    assert "content" in schemas["CreateAction"]["required"]
    assert schemas["DeleteAction"]["properties"]["content"]["type"] == "null"
    assert "previous_path" in schemas["MoveAction"]["required"]
    assert schemas["UpdateAction"]["properties"]["previous_path"]["type"] == "null"
    assert mr["file_actions"]["items"]["discriminator"]["propertyName"] == "action"


def test_the_configured_projects_are_in_the_openapi_document(
    api: tuple[Runtime, TestClient],
) -> None:
    _, client = api
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    pattern = schemas["MrCreate"]["properties"]["project"]["pattern"]
    # `group` is the one configured entry: itself and what lies below it, nothing else.
    for project, documented in (
        ("group", True),
        ("group/project", True),
        ("group/sub/project", True),
        ("groupie/project", False),
        ("other/project", False),
        ("group/../x", False),
    ):
        assert (re.fullmatch(pattern, project) is not None) == documented, project
        response = client.post(
            URL, json=payload(project=project, source_branch=f"wq/{len(project)}")
        )
        assert (response.status_code == 201) == documented, (project, response.text)


@pytest.fixture
def default_api(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Runtime, TestClient]]:
    """The daemon's app with the `mr` type's and the server's default limits."""
    with mr_api(store, monkeypatch) as made:
        yield made


def test_files_are_held_to_max_file_bytes_not_the_per_field_document_limit(
    default_api: tuple[Runtime, TestClient],
) -> None:
    # `server.max_document_bytes` (256 KiB per body field) refused a 300 KB file, or
    # three of 133 KB, although `max_file_bytes` allows 10 MiB per file.
    runtime, client = default_api
    one_large = _files({"action": "create", "file_path": "large", "content": "x" * 300_000})
    three = _files(
        *[{"action": "create", "file_path": f"f{n}", "content": "y" * 133_000} for n in range(3)]
    )
    for number, overrides in enumerate((one_large, three)):
        response = client.post(URL, json=payload(source_branch=f"wq/large-{number}", **overrides))
        assert response.status_code == 201, response.text[:300]
        item = client.get(f"/api/work-items/{response.json()['item']['id']}")
        assert item.status_code == 200
    assert client.get("/api/work-items").status_code == 200
    # Still refused: a file over max_file_bytes, and a listed field over the server's limit.
    too_large = _files({"action": "create", "file_path": "huge", "content": "z" * 10_485_761})
    response = client.post(URL, json=payload(source_branch="wq/huge", **too_large))
    assert response.status_code == 422 and "max_file_bytes" in response.json()["error"]
    response = client.post(URL, json=payload(source_branch="wq/d", description="d" * 300_000))
    assert response.status_code == 422
    assert "description: 292 KiB, at most 256 KiB" in response.json()["error"]
    assert _count(runtime) == 2
