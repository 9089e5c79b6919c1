"""The documented project pattern says exactly what the project check accepts."""

from __future__ import annotations

import re

from hypothesis import example, given, settings
from hypothesis import strategies as st

from wq.types.project import PROJECT_PATTERN, project_problem

# Paths built from the characters that matter (dots, slashes, backslash, controls).
TRICKY = st.text(
    alphabet=st.sampled_from(list("ab./\\ \x00\x1f\x7f\x85\xa0\u200b\u202e\u3000\ufeffé")),
    max_size=12,
)


@settings(max_examples=500, derandomize=True)
@given(st.one_of(TRICKY, st.text(max_size=12)))
@example("group/project")
@example("a/.../b")
@example("..a/.b")
@example("a/./b")
@example("a/../b")
@example("a//b")
@example("/a")
@example("a/")
@example("")
@example("a\nb")
@example("a\\b")
@example("my project")
@example("group/\u202etcejorp")
@example("a\u200bb")
def test_the_pattern_and_the_check_agree(path: str) -> None:
    assert (re.fullmatch(PROJECT_PATTERN, path) is not None) == (project_problem(path) is None)
