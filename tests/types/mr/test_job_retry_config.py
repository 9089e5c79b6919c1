"""The CI job retry matcher tree: parsing, inheritance, matching, delays, errors."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest

from wq.engine.config import ConfigError
from wq.types.mr.job_retry import decide, format_duration, trace_lines, trace_tail
from wq.types.mr.job_retry_parse import JobRetryConfigError, parse_duration, parse_job_retry
from wq.types.mr.settings import parse_settings

GIT_CLONE_TRACE = """\
Running with gitlab-runner 16.5.0 (853330f9)
\x1b[0KGetting source from Git repository\x1b[0;m
Fetching changes with git depth set to 20...
Initialized empty Git repository in /builds/group/project/.git/
fatal: unable to access 'https://gitlab.com/group/project.git/': Could not resolve host
ERROR: Job failed: exit code 1
"""
RPC_TRACE = """\
Cloning repository...
error: RPC failed; curl 92 HTTP/2 stream 5 was not closed cleanly: CANCEL (err 8)
error: 4143 bytes of body are still expected
ERROR: Job failed: exit code 1
"""
TEST_FAILURE_TRACE = """\
$ pytest -q
F.....
FAILED tests/test_unpack.py::test_unpack - AssertionError: fatal: unable to
  access is not in the output
1 failed, 5 passed in 0.42s
ERROR: Job failed: exit code 1
"""

CONFIG: dict[str, Any] = {
    "retry_delays": ["0", "5m", "10m"],
    "retry_limit": 5,
    "matchers": [
        {
            "name": "runner-system-failure",
            "description": "Job failed with runner_system_failure",
            "failure_reason": "runner_system_failure",
        },
        {
            "name": "git-clone",
            "description": "Git clone failure",
            "messages": [
                "fatal: unable to access",
                r"/error: RPC failed; curl 92 HTTP\/2 stream \d+/",
            ],
        },
        {
            "name": "reported",
            "action": "report",
            "retry_limit": 1,
            "matchers": [
                {"name": "oom", "messages": ["Killed"], "tail_lines": 2},
                {"name": "oom-big", "job_name": "^big-", "retry_limit": 7},
            ],
        },
    ],
}


def test_a_failure_reason_alone_matches() -> None:
    config = parse_job_retry(CONFIG)
    node = config.match("runner_system_failure", "build", None)
    assert node is not None and node.name == "runner-system-failure"
    assert node.action == "retry" and node.retry_limit == 5
    assert config.match("script_failure", "build", None) is None


def test_a_literal_is_a_substring_of_one_line() -> None:
    config = parse_job_retry(CONFIG)
    node = config.match("script_failure", "build", GIT_CLONE_TRACE)
    assert node is not None and node.name == "git-clone"
    # A literal split across two lines is not found, even though the joined text has it.
    assert config.match("script_failure", "test", TEST_FAILURE_TRACE) is None


def test_a_slashed_message_is_a_regex_over_the_joined_text() -> None:
    config = parse_job_retry(CONFIG)
    node = config.match("script_failure", "build", RPC_TRACE)
    assert node is not None and node.name == "git-clone"
    joined = parse_job_retry(
        {"matchers": [{"name": "two-lines", "messages": [r"/CANCEL \(err 8\)\nerror: 4143/"]}]}
    )
    assert joined.match(None, "build", RPC_TRACE) is not None
    literal = parse_job_retry({"matchers": [{"name": "lit", "messages": ["curl 92 HTTP/2"]}]})
    assert literal.match(None, "build", RPC_TRACE) is not None
    assert literal.match(None, "build", "curl 92 HTTP\\/2") is None


def test_a_pattern_that_backtracks_without_end_is_given_up_not_run_for_ever(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Patterns come from the config and traces from whoever runs the CI job: with
    Python's `re`, `(a|aa)+$` on 60 `a`s and a `b` ran for hours, holding a worker (and,
    the search holding the interpreter's lock, the whole daemon)."""
    config = parse_job_retry(
        {
            "matchers": [
                {"name": "evil", "messages": ["/(a|aa)+$/"]},
                {"name": "evil-name", "job_name": "(a|aa)+$"},
                {"name": "plain", "messages": ["/b$/"]},
            ]
        }
    )
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="wq.types.mr.job_retry"):
        node = config.match(None, "a" * 60 + "b", "a" * 60 + "b")
    assert node is not None and node.name == "plain"  # the others taken as not found
    assert time.monotonic() - started < 10
    warnings = [record.getMessage() for record in caplog.records]
    assert len(warnings) == 2 and all("gave up after 1s" in line for line in warnings)
    assert "(a|aa)+$" in warnings[0]


def test_children_inherit_and_override() -> None:
    config = parse_job_retry(CONFIG)
    oom = config.match("script_failure", "build", "a\nKilled\nERROR: Job failed\n")
    assert oom is not None and oom.name == "oom"
    assert oom.action == "report"  # from the parent
    assert oom.retry_limit == 1  # from the parent's override
    assert oom.retry_delays == (0.0, 300.0, 600.0)  # from the top level
    big = config.match("script_failure", "big-build", None)
    assert big is not None and big.name == "oom-big"
    assert big.action == "report" and big.retry_limit == 7
    assert big.path == "job_retry.matchers[2].matchers[1]"


def test_a_parent_is_tried_before_its_children() -> None:
    config = parse_job_retry(
        {
            "matchers": [
                {
                    "name": "clone",
                    "messages": ["fatal: unable to access"],
                    "action": "report",
                    "matchers": [
                        # Overrides the parent's condition: reachable, inherits the action.
                        {"name": "rpc", "messages": ["/error: RPC failed/"], "retry_limit": 9},
                    ],
                }
            ]
        }
    )
    clone = config.match("script_failure", "build", GIT_CLONE_TRACE)
    assert clone is not None and clone.name == "clone"
    rpc = config.match("script_failure", "build", RPC_TRACE)
    assert rpc is not None and rpc.name == "rpc"
    assert (rpc.action, rpc.retry_limit) == ("report", 9)
    # A trace with both: the parent comes first in the document.
    both = config.match("script_failure", "build", GIT_CLONE_TRACE + RPC_TRACE)
    assert both is not None and both.name == "clone"


@pytest.mark.parametrize(
    "child",
    [
        {"name": "docs", "job_name": "^docs$"},  # only narrows
        {"name": "same", "action": "report"},  # changes no condition
        {"name": "tail", "messages": ["fatal: unable to access"]},  # the same message again
    ],
)
def test_a_child_its_parent_always_beats_is_refused(child: dict[str, Any]) -> None:
    with pytest.raises(JobRetryConfigError) as err:
        parse_job_retry(
            {
                "matchers": [
                    {"name": "clone", "messages": ["fatal: unable to access"], "matchers": [child]}
                ]
            }
        )
    assert str(err.value).startswith("job_retry.matchers[0].matchers[0]: can never match")
    # A different tail is a different condition: allowed.
    parse_job_retry(
        {
            "matchers": [
                {
                    "name": "clone",
                    "messages": ["fatal: unable to access"],
                    "matchers": [{"name": "end", "tail_lines": 5}],
                }
            ]
        }
    )


def test_first_match_in_document_order_wins() -> None:
    config = parse_job_retry(
        {
            "matchers": [
                {"name": "first", "failure_reason": "script_failure"},
                {"name": "second", "messages": ["boom"]},
            ]
        }
    )
    node = config.match("script_failure", "build", "boom\n")
    assert node is not None and node.name == "first"


def test_a_node_without_conditions_never_matches() -> None:
    config = parse_job_retry({"matchers": [{"name": "group", "action": "report"}]})
    assert config.match("script_failure", "build", "anything\n") is None


def test_all_conditions_must_hold() -> None:
    config = parse_job_retry(
        {
            "matchers": [
                {
                    "name": "both",
                    "failure_reason": "script_failure",
                    "job_name": "^test",
                    "messages": ["boom"],
                }
            ]
        }
    )
    assert config.match("script_failure", "test-unit", "boom\n") is not None
    assert config.match("runner_system_failure", "test-unit", "boom\n") is None
    assert config.match("script_failure", "build", "boom\n") is None
    assert config.match("script_failure", "test-unit", "fine\n") is None
    # An unfetched trace never satisfies a message condition.
    assert config.match("script_failure", "test-unit", None) is None


def test_tail_lines_limits_the_search_to_the_end() -> None:
    config = parse_job_retry({"matchers": [{"name": "t", "messages": ["Killed"], "tail_lines": 2}]})
    assert config.match(None, "b", "Killed\nx\ny\nz\n") is None
    assert config.match(None, "b", "x\nKilled\ny\n") is not None
    regex = parse_job_retry({"matchers": [{"name": "r", "messages": ["/^x$/"], "tail_lines": 1}]})
    assert regex.match(None, "b", "x\ny\n") is None


def test_trace_lines_strip_colours_and_overwrites() -> None:
    lines = trace_lines("\x1b[32;1mok\x1b[0;m\nprogress 10%\rprogress 100%\n")
    assert lines == ["ok", "progress 100%"]
    assert trace_lines("a\nb\nc\n", 2) == ["b", "c"]


def test_needs_trace_only_when_a_message_node_could_win() -> None:
    config = parse_job_retry(CONFIG)
    # runner_system_failure is decided before any message node: no trace needed.
    assert not config.needs_trace("runner_system_failure", "build")
    assert config.needs_trace("script_failure", "build")
    no_messages = parse_job_retry({"matchers": [{"name": "r", "failure_reason": "x"}]})
    assert not no_messages.needs_trace("script_failure", "build")
    assert config.max_tail_lines() is None
    tails = parse_job_retry(
        {
            "matchers": [
                {"name": "a", "messages": ["x"], "tail_lines": 5, "matchers": [{"tail_lines": 50}]}
            ]
        }
    )
    assert tails.max_tail_lines() == 50


def test_delays_by_attempt_repeat_the_last() -> None:
    config = parse_job_retry(CONFIG)
    node = config.match("runner_system_failure", "build", None)
    assert node is not None
    assert [node.delay_for(n) for n in range(5)] == [0.0, 300.0, 600.0, 600.0, 600.0]


@pytest.mark.parametrize(
    ("text", "seconds"), [("0", 0), ("30s", 30), ("5m", 300), ("1h", 3600), (45, 45)]
)
def test_durations(text: Any, seconds: float) -> None:
    assert parse_duration(text, "d") == seconds


def test_defaults_without_config() -> None:
    config = parse_job_retry({})
    assert config.retry_delays == (0.0,) and config.retry_limit == 3 and config.matchers == ()


BAD = [
    ({"retry_delays": ["0", "5 minutes"]}, "job_retry.retry_delays[1]: invalid duration"),
    ({"retry_delays": []}, "job_retry.retry_delays: must be a non-empty list"),
    ({"retry_limit": -1}, "job_retry.retry_limit: must be an integer >= 0"),
    ({"retry_limit": True}, "job_retry.retry_limit: must be an integer"),
    ({"unknown": 1}, "job_retry.unknown: unknown field"),
    ({"matchers": {"name": "x"}}, "job_retry.matchers: must be a list"),
    ({"matchers": ["x"]}, "job_retry.matchers[0]: must be a mapping"),
    ({"matchers": [{"name": "x", "colour": "red"}]}, "job_retry.matchers[0].colour: unknown field"),
    ({"matchers": [{"name": "x", "action": "ignore"}]}, "job_retry.matchers[0].action: must be"),
    (
        {"matchers": [{"name": "x", "job_name": "(["}]},
        "job_retry.matchers[0].job_name: invalid regex",
    ),
    ({"matchers": [{"name": "x", "messages": "boom"}]}, "job_retry.matchers[0].messages: must be"),
    ({"matchers": [{"name": "x", "tail_lines": 0}]}, "job_retry.matchers[0].tail_lines: must be"),
    (
        {
            "matchers": [
                {"name": "a"},
                {"name": "b"},
                {"name": "c", "matchers": [{"name": "d", "messages": ["fine", "/(unclosed/"]}]},
            ]
        },
        "job_retry.matchers[2].matchers[0].messages[1]: invalid regex",
    ),
    (
        {"matchers": [{"name": "a", "matchers": [{"retry_delays": ["0", "soon"]}]}]},
        "job_retry.matchers[0].matchers[0].retry_delays[1]: invalid duration",
    ),
]


@pytest.mark.parametrize(("data", "message"), BAD)
def test_invalid_config_names_the_path(data: dict[str, Any], message: str) -> None:
    with pytest.raises(JobRetryConfigError) as err:
        parse_job_retry(data)
    assert str(err.value).startswith(message)


def test_mr_settings_refuse_to_start_on_a_bad_matcher() -> None:
    with pytest.raises(ConfigError) as err:
        parse_settings(
            {"job_retry": {"matchers": [{"name": "a", "messages": ["/(/"]}]}}, source="wq.yaml"
        )
    assert "handled_types.mr.job_retry.matchers[0].messages[0]: invalid regex" in str(err.value)
    settings = parse_settings({"job_retry": CONFIG})
    assert settings.job_retry_config is not None
    assert settings.job_retry_config.retry_limit == 5
    assert parse_settings({}).job_retry_config is None


def test_the_verdict_follows_the_node_and_the_attempt() -> None:
    config = parse_job_retry(CONFIG)
    assert decide(config, "script_failure", "build", "all fine\n", 0).outcome == "no_match"
    oom = decide(config, "script_failure", "build", "x\nKilled\n", 0)
    assert (oom.outcome, oom.node and oom.node.name) == ("report", "oom")
    runner = [decide(config, "runner_system_failure", "build", None, n) for n in range(6)]
    assert [(v.outcome, v.delay) for v in runner] == [
        ("retry", 0.0),
        ("retry", 300.0),
        ("retry", 600.0),
        ("retry", 600.0),
        ("retry", 600.0),
        ("limit_reached", 0.0),
    ]
    assert [format_duration(s) for s in (0, 45, 300, 3600, 90)] == ["0", "45s", "5m", "1h", "90s"]


def test_the_trace_tail_drops_the_line_the_cut_went_through() -> None:
    data = b"first line\nsecond\nthird\n"
    assert trace_tail(data, 100) == "first line\nsecond\nthird\n"
    assert trace_tail(data, 13) == "second\nthird\n"  # cut between two lines
    assert trace_tail(data, 12) == "third\n"  # "econd" was cut: dropped
    assert trace_tail(b"\xff\xfeok\n", 10) == "\ufffd\ufffdok\n"
    assert trace_tail(b"x" * 50, 10) == ""
