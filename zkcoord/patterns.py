"""Subscription patterns: which regular expressions over topic names are
accepted, and how they are matched.

A pattern comes from outside (a registration, a KIP-848 heartbeat's
subscribed_topic_regex, a Spark option) and is matched on the coordinator's
event loop against every topic name. A backtracking engine (Python's ``re``,
Java's) can take exponential time on a pattern such as ``([a-z]+)+X``, long
enough to stall every member and the ZooKeeper session; so patterns are
compiled and matched by RE2, whose time is linear in the topic name's length
and whose compiled program is bounded in memory. What RE2 cannot run in that
time (backreferences, lookaround, possessive quantifiers, atomic groups) is
refused with the reason, as is a pattern longer than
:data:`MAX_PATTERN_LENGTH`. Every other pattern in common use, Java's syntax
included (classes, ``\\d``, ``\\w``, ``\\Q...\\E``, ``(?i)``, lazy
quantifiers, named groups), means the same as it does to Kafka's consumer;
Java's class intersection (``&&``) is refused.
A pattern matches the whole topic name, as Java's ``Matcher.matches()``.
"""

from __future__ import annotations

import functools

import re2

from zkcoord.errors import ZkcoordError

# Kafka bounds neither; a pattern this long is not a subscription but a
# payload. Topic names are at most 249 characters.
MAX_PATTERN_LENGTH = 1000
# RE2's bound on what one compiled pattern may hold, its program and the
# DFA states it builds as it matches (past it, RE2 matches without a DFA,
# still in linear time). A pattern whose program alone would be larger is
# refused. Subscriptions compile to a few KB; with the cache below, a crowd
# of distinct patterns holds at most 1 GiB, in practice far less.
_MAX_PROGRAM_BYTES = 1 << 20


class PatternError(ZkcoordError, ValueError):
    """A subscription pattern that is not accepted: not a regular expression,
    too long, or using what no linear-time engine can run."""


def _options() -> "re2.Options":
    options = re2.Options()
    options.log_errors = False  # a refused pattern is reported to whoever sent it, not to stderr
    options.max_mem = _MAX_PROGRAM_BYTES
    return options


@functools.lru_cache(maxsize=1024)
def compile_pattern(pattern: str):
    """The compiled ``pattern``, or :class:`PatternError` saying why it is refused."""
    if not isinstance(pattern, str) or not pattern:
        raise PatternError("a pattern must be a non-empty string")
    if len(pattern) > MAX_PATTERN_LENGTH:
        raise PatternError(f"the pattern is {len(pattern)} characters long; at most {MAX_PATTERN_LENGTH} "
                           "are accepted")
    if "&&" in pattern:
        # Java's class intersection ([a-z&&[^b]]), which RE2 would read as a
        # union with '&'. No topic name holds '&', so nothing else is lost.
        raise PatternError(f"pattern {pattern!r} is refused: '&&' (Java's class intersection) is not supported")
    try:
        return re2.compile(pattern, _options())
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise PatternError(f"pattern {pattern!r} is refused: {reason} (accepted: regular expressions "
                           "without backreferences, lookaround, possessive quantifiers or atomic groups, "
                           f"at most {MAX_PATTERN_LENGTH} characters)") from None


def check_pattern(pattern: str) -> str:
    """``pattern`` if it is accepted; :class:`PatternError` otherwise."""
    compile_pattern(pattern)
    return pattern


def matches(pattern: str, topic: str) -> bool:
    """Does ``pattern`` (accepted) match the whole of ``topic``?"""
    return compile_pattern(pattern).fullmatch(topic) is not None
