"""Subscription patterns (zkcoord/patterns.py): what is accepted, what is
refused and why, and that no accepted pattern takes more than linear time."""

import re
import time

import pytest

from zkcoord import wire
from zkcoord.coordinator.planner import Subscription
from zkcoord.errors import ConfigError
from zkcoord.member.config import MemberConfig
from zkcoord.patterns import MAX_PATTERN_LENGTH, PatternError, check_pattern, matches
from tests.unit.core_harness import CoreHarness

ACCEPTED = {
    # pattern: (a topic it matches, one it does not)
    "orders-.*": ("orders-eu", "xorders-eu"),
    r"\Qa.b\E": ("a.b", "axb"),
    "(?i)ORDERS": ("orders", "order"),
    r"(?<year>\d{4})-logs": ("2024-logs", "24-logs"),
    "metrics_[a-c]+?": ("metrics_ab", "metrics_d"),
    "a|b": ("b", "ab"),
}


@pytest.mark.parametrize("pattern", sorted(ACCEPTED))
def test_accepted_patterns_match_the_whole_name_as_java_does(pattern):
    yes, no = ACCEPTED[pattern]
    assert check_pattern(pattern) == pattern
    assert matches(pattern, yes) and not matches(pattern, no)


REFUSED = {
    "backreference": (r"(a)\1", "invalid escape"),
    "lookahead": ("(?=a)a", "(?="),
    "lookbehind": ("(?<=a)b", "(?<"),
    "possessive quantifier": ("a*+", "*+"),
    "atomic group": ("(?>a)", "(?>"),
    "class intersection": ("[a-z&&[^b]]", "&&"),
    "not a regex": ("w-([", "missing"),
    "huge repetition": ("(a{1000}){1000}", "repetition"),
    "too long": ("a" * (MAX_PATTERN_LENGTH + 1), f"at most {MAX_PATTERN_LENGTH}"),
    "empty": ("", "non-empty"),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refused_patterns_say_why(name):
    pattern, reason = REFUSED[name]
    with pytest.raises(PatternError, match=re.escape(reason)):
        check_pattern(pattern)


def test_a_catastrophic_pattern_runs_in_linear_time():
    """``([a-z]+)+X`` takes Python's re about 0.3 s on 22 characters and 4x
    per 2 more; here 249 characters (the longest topic name) take microseconds."""
    names = ["a" * n for n in range(200, 250)]
    began = time.perf_counter()
    assert not any(matches("([a-z]+)+X", name) for name in names)
    assert matches("([a-z]+)+X", "a" * 248 + "X")
    assert time.perf_counter() - began < 0.5


def test_a_refused_pattern_is_refused_wherever_it_is_given():
    with pytest.raises(ConfigError, match="refused"):
        MemberConfig(group="g", pattern=r"(a)\1")
    assert Subscription(pattern="t-[0-9]+").matches("t-12")
    assert not Subscription(pattern="t-[0-9]+").matches("t-12x")
    h = CoreHarness()
    h.register("c1", "m1", topics=(), pattern=r"(a)\1")
    (answer, _), = h.sent["c1"]
    assert answer.error_code == wire.ErrorCode.INVALID_REGISTRATION
    assert "invalid escape" in answer.error_message and "c1" in h.closed and "g" not in h.core.groups
