"""The OpenAPI document states git's rules for an MR exactly as the server applies them.

Paths, branches, labels and base64 content are checked by readable validators; the
document carries the same rules as JSON Schema (`pattern` and `not`). A client that
trusts the document (a generated client, schemathesis) must find every value it allows
accepted and every value it forbids refused: each value here is judged by both, with
the JSON Schema validator schemathesis itself uses (ECMA 262 regular expressions).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jsonschema_rs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from tests.types.mr.test_validation import BAD_BRANCHES, BAD_PATHS
from wq.types.mr.schemas import MrCreate, UpdateAction
from wq.types.mr.validation import branch_problem, label_problem, path_problem

# Pieces that the rules single out, so that generated values hit them often.
PIECES = [
    *".-/@{}~^:?*[\\,1 \t\n\x7f\x85\xa0\u2000\u3000é",
    ".lock",
    ".git",
    ".GiT",
    "git~1",
    "GIT~1",
    "refs",
    "refs/",
    "HEAD",
    "a",
    "..",
]
VALUES = st.lists(st.sampled_from(PIECES), max_size=8).map("".join) | st.text(max_size=12)
NEAR_MISSES = [
    ".gitignore",
    ".github/workflows/ci.yml",
    "a/b.c/d",
    "...",
    ". ",
    "a./b",
    "refs",
    "HEAD/x",
    "x.locks",
    "@x",
    "{a}",
    "wq/ünïcode",
    "a b",
    "\x85x",
]


def _document() -> dict[str, Any]:
    return MrCreate.model_json_schema()


def _rules() -> list[tuple[str, dict[str, Any], Callable[[str], str | None]]]:
    document = _document()
    fields = document["properties"]
    actions = document["$defs"]
    return [
        ("file_path", actions["UpdateAction"]["properties"]["file_path"], path_problem),
        ("previous_path", actions["MoveAction"]["properties"]["previous_path"], path_problem),
        ("source_branch", fields["source_branch"], branch_problem),
        ("target_branch", fields["target_branch"], branch_problem),
        ("labels", fields["labels"]["items"], label_problem),
    ]


RULES = _rules()
VALIDATORS = [
    (name, jsonschema_rs.validator_for(schema), problem) for name, schema, problem in RULES
]


def _disagreements(value: str) -> list[str]:
    return [
        f"{name}: document {'allows' if documented else 'forbids'} {value!r}, server says "
        f"{problem(value)!r}"
        for name, validator, problem in VALIDATORS
        if (documented := validator.is_valid(value)) != (problem(value) is None)
    ]


@pytest.mark.parametrize("value", [*BAD_PATHS, *BAD_BRANCHES, *NEAR_MISSES, "", " ", "a,b"])
def test_the_document_and_the_server_agree_on_known_cases(value: str) -> None:
    assert _disagreements(value) == []


@settings(max_examples=1500, deadline=None)
@given(VALUES)
def test_the_document_and_the_server_agree_on_any_value(value: str) -> None:
    assert _disagreements(value) == []


BASE64 = st.lists(st.sampled_from([*"AZaz09+/=", "\n", " ", "-", "QQ==", "QUI="]), max_size=10)


@settings(max_examples=500, deadline=None)
@given(BASE64.map("".join))
def test_base64_content_is_documented_as_it_is_checked(content: str) -> None:
    schema = _document()["$defs"]["UpdateAction"]
    action = {"action": "update", "file_path": "a", "encoding": "base64", "content": content}
    try:
        UpdateAction.model_validate(action)
        accepted = True
    except ValidationError:
        accepted = False
    assert jsonschema_rs.validator_for(schema).is_valid(action) == accepted, content
