"""The documented project pattern says exactly what the project check accepts."""

from __future__ import annotations

import re
import sys
import unicodedata

from hypothesis import example, given, settings
from hypothesis import strategies as st

from wq.types.project import PROJECT_PATTERN, project_problem

# Paths built from the characters that matter (dots, slashes, backslash, controls).
TRICKY = st.text(
    alphabet=st.sampled_from(list("ab-./\\ \x00\x1f\x7f\x85\xa0\u200b\u202e\u3000\ufeffé")),
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
@example("demo\u061cx")
@example("demo\U000e0001x")
@example("demo\u3164")
@example("-rf")
@example("group/--help")
@example("a-b/.-x/..-")
def test_the_pattern_and_the_check_agree(path: str) -> None:
    assert (re.fullmatch(PROJECT_PATTERN, path) is not None) == (project_problem(path) is None)


def test_every_format_and_ignorable_character_is_refused() -> None:
    # Every format character (a bidirectional mark, a tag character, an interlinear
    # annotation...) and the blank-looking fillers, which make lookalikes of a name.
    unseen = [
        chr(code)
        for code in range(sys.maxunicode + 1)
        if unicodedata.category(chr(code)) in ("Cc", "Cf", "Zs", "Zl", "Zp")
    ]
    unseen += ["\u115f", "\u1160", "\u3164", "\uffa0", "\u034f", "\ufe0f", "\U000e0100"]
    accepted = [f"U+{ord(c):04X}" for c in unseen if project_problem(f"demo{c}x") is None]
    assert accepted == []
    assert all(re.fullmatch(PROJECT_PATTERN, f"demo{c}x") is None for c in unseen)
    # Letters of every script stay welcome.
    assert project_problem("grüppe/проект/项目/مشروع") is None


def test_a_segment_starting_with_a_dash_is_refused() -> None:
    """`-rf` and `group/--help` were taken, and a task kind's `{repository}` handed them
    to its program as options; a dash inside a segment is a name like any other."""
    for path in ("-rf", "group/--help", "group/-app"):
        assert project_problem(path) == "must not have a segment that starts with '-'"
    for path in ("my-group/my-app", "group/app-", "a/.-x"):
        assert project_problem(path) is None, path
