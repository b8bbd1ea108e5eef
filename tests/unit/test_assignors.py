"""Assignment strategies: worked examples, and properties over randomised groups.

Every assignor must cover each existing partition of a subscribed topic exactly
once, only with a subscriber, and be deterministic. Balance and movement are
checked per strategy: range against its definition, round robin and sticky
against max - min <= 1 for identical subscriptions, sticky also against a
direct search for any chain of moves that would still even the load out, and
against the least movement that reaches balance.
"""

from __future__ import annotations

import doctest
import math
from collections import deque

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zkcoord.coordinator import assignors
from zkcoord.coordinator.assignors import (
    ASSIGNORS,
    NoCommonStrategyError,
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
    choose_strategy,
)
from zkcoord.errors import ZkcoordError

MEMBERS = [f"m{i}" for i in range(10)]
TOPICS = ["t0", "t1", "t2", "t3"]
STICKY = StickyAssignor()

member_ids = st.lists(st.sampled_from(MEMBERS), min_size=1, max_size=8, unique=True)
# Some topics have no partitions entry at all (not created yet), some have zero.
partition_counts = st.dictionaries(st.sampled_from(TOPICS), st.integers(0, 12))
topic_sets = st.frozensets(st.sampled_from(TOPICS + ["absent"]))


@st.composite
def groups(draw, identical=False):
    members = draw(member_ids)
    if identical:
        topics = draw(topic_sets)
        subscriptions = {m: topics for m in members}
    else:
        subscriptions = {m: draw(topic_sets) for m in members}
    return subscriptions, draw(partition_counts)


@st.composite
def currents(draw, subscriptions, partitions_per_topic):
    """A current assignment as a coordinator might hold it: partial, unbalanced,
    naming departed members, partitions that no longer exist and, rarely,
    one partition claimed twice."""
    owners = sorted(subscriptions) + ["departed"]
    owned = {m: set() for m in owners}
    candidates = [(t, p) for t in TOPICS for p in range(partitions_per_topic.get(t, 0) + 2)]
    for tp in candidates:
        for owner in draw(st.lists(st.sampled_from(owners), max_size=2, unique=True)):
            owned[owner].add(tp)
    return {m: frozenset(tps) for m, tps in owned.items()}


def expected_partitions(subscriptions, partitions_per_topic):
    subscribed = set().union(*subscriptions.values())
    return {(t, p) for t, n in partitions_per_topic.items() if t in subscribed for p in range(n)}


def owners(assignment):
    return {tp: m for m, tps in assignment.items() for tp in tps}


def counts(assignment):
    return {m: len(tps) for m, tps in assignment.items()}


def check_valid(assignment, subscriptions, partitions_per_topic):
    assert set(assignment) == set(subscriptions)
    assert all(isinstance(tps, frozenset) for tps in assignment.values())
    listed = [tp for tps in assignment.values() for tp in tps]
    assert len(listed) == len(set(listed)), "a partition is assigned twice"
    assert set(listed) == expected_partitions(subscriptions, partitions_per_topic)
    for member, tps in assignment.items():
        assert all(topic in subscriptions[member] for topic, _ in tps)


def valid_previous(current, subscriptions, partitions_per_topic):
    """Who owned each partition before, counting only ownership that may stand."""
    previous = {}
    for member in sorted(current):
        for topic, partition in sorted(current[member]):
            if (
                member in subscriptions
                and topic in subscriptions[member]
                and partition < partitions_per_topic.get(topic, 0)
            ):
                previous.setdefault((topic, partition), member)
    return previous


def moved(previous, assignment):
    now = owners(assignment)
    return {tp for tp, member in previous.items() if now[tp] != member}


def least_moves_identical(previous, members, total):
    """For identical subscriptions: the fewest partitions that must leave their
    previous owner to reach counts that differ by at most one. The ``extra``
    larger shares go to members that already hold that many, fullest first."""
    held = sorted((sum(1 for m in previous.values() if m == member) for member in members), reverse=True)
    base, extra = divmod(total, len(members))
    targets = [base + 1 if i < extra else base for i in range(len(members))]
    return sum(max(0, h - t) for h, t in zip(held, targets))


def uneven_chain(assignment, subscriptions):
    """A chain of single-partition moves, each to a subscriber of the topic,
    from a member with n partitions to one with at most n - 2, if any exists."""
    count = counts(assignment)
    for source in assignment:
        seen, queue = {source}, deque([source])
        while queue:
            giver = queue.popleft()
            for topic in {t for t, _ in assignment[giver]}:
                for taker in subscriptions:
                    if topic in subscriptions[taker] and taker not in seen:
                        if count[taker] <= count[source] - 2:
                            return source, taker
                        seen.add(taker)
                        queue.append(taker)
    return None


ALL = pytest.mark.parametrize("assignor", list(ASSIGNORS.values()), ids=list(ASSIGNORS))


# --- every assignor ----------------------------------------------------------


def test_registry_names_every_strategy():
    assert {name: type(a) for name, a in ASSIGNORS.items()} == {
        "range": RangeAssignor,
        "roundrobin": RoundRobinAssignor,
        "sticky": StickyAssignor,
    }


@ALL
@given(data=st.data())
def test_each_partition_once_and_only_to_a_subscriber(assignor, data):
    subscriptions, partitions = data.draw(groups())
    current = data.draw(st.none() | currents(subscriptions, partitions))
    check_valid(assignor.assign(subscriptions, partitions, current=current), subscriptions, partitions)


@ALL
@given(data=st.data())
def test_deterministic_whatever_the_order_of_the_inputs(assignor, data):
    subscriptions, partitions = data.draw(groups())
    current = data.draw(st.none() | currents(subscriptions, partitions))
    first = assignor.assign(subscriptions, partitions, current=current)
    shuffled = {m: set(subscriptions[m]) for m in data.draw(st.permutations(sorted(subscriptions)))}
    reordered = dict(reversed(list(partitions.items())))
    current_again = None if current is None else dict(reversed(list(current.items())))
    assert assignor.assign(shuffled, reordered, current=current_again) == first


@ALL
def test_no_partitions_or_no_subscribers(assignor):
    assert assignor.assign({"a": {"t"}, "b": set()}, {"u": 4, "t": 0}) == {"a": frozenset(), "b": frozenset()}
    assert assignor.assign({}, {"t": 3}) == {}


@pytest.mark.parametrize("assignor", [RoundRobinAssignor(), STICKY], ids=["roundrobin", "sticky"])
@given(data=st.data())
def test_identical_subscriptions_balance_within_one(assignor, data):
    subscriptions, partitions = data.draw(groups(identical=True))
    current = data.draw(st.none() | currents(subscriptions, partitions))
    count = counts(assignor.assign(subscriptions, partitions, current=current))
    assert max(count.values()) - min(count.values()) <= 1


# --- range -------------------------------------------------------------------


def test_range_seed_example():
    # 10 partitions over 3 members: 4, 3, 3, in contiguous runs.
    result = RangeAssignor().assign({"c": {"t"}, "a": {"t"}, "b": {"t"}}, {"t": 10})
    assert result == {
        "a": frozenset(("t", p) for p in range(0, 4)),
        "b": frozenset(("t", p) for p in range(4, 7)),
        "c": frozenset(("t", p) for p in range(7, 10)),
    }


@given(groups())
def test_range_gives_each_subscriber_a_contiguous_share_larger_first(group):
    subscriptions, partitions = group
    result = RangeAssignor().assign(subscriptions, partitions)
    for topic, n in partitions.items():
        members = sorted(m for m in subscriptions if topic in subscriptions[m])
        start = 0
        for index, member in enumerate(members):
            mine = sorted(p for t, p in result[member] if t == topic)
            size = n // len(members) + (1 if index < n % len(members) else 0)
            assert mine == list(range(start, start + size))
            start += size


# --- round robin -------------------------------------------------------------


def test_roundrobin_skips_members_not_subscribed():
    # a consumes t, b consumes t and u, c consumes u. Partitions t0 t1 t2 u0 u1 u2
    # go to a, b, a (c skipped), b, c, b (a skipped).
    result = RoundRobinAssignor().assign({"a": {"t"}, "b": {"t", "u"}, "c": {"u"}}, {"t": 3, "u": 3})
    assert result == {
        "a": frozenset({("t", 0), ("t", 2)}),
        "b": frozenset({("t", 1), ("u", 0), ("u", 2)}),
        "c": frozenset({("u", 1)}),
    }


@given(groups(identical=True))
def test_roundrobin_deals_sorted_partitions_in_member_order(group):
    subscriptions, partitions = group
    result = RoundRobinAssignor().assign(subscriptions, partitions)
    members = sorted(subscriptions)
    dealt = sorted(expected_partitions(subscriptions, partitions))
    assert owners(result) == {tp: members[i % len(members)] for i, tp in enumerate(dealt)}


# --- sticky ------------------------------------------------------------------


@given(data=st.data())
def test_sticky_leaves_no_chain_of_moves_that_would_even_out_the_load(data):
    subscriptions, partitions = data.draw(groups())
    current = data.draw(st.none() | currents(subscriptions, partitions))
    assert uneven_chain(STICKY.assign(subscriptions, partitions, current=current), subscriptions) is None


@given(data=st.data())
def test_sticky_moves_the_fewest_partitions_that_reach_balance(data):
    subscriptions, partitions = data.draw(groups(identical=True))
    current = data.draw(currents(subscriptions, partitions))
    result = STICKY.assign(subscriptions, partitions, current=current)
    previous = valid_previous(current, subscriptions, partitions)
    total = len(expected_partitions(subscriptions, partitions))
    assert len(moved(previous, result)) == least_moves_identical(previous, list(subscriptions), total)


@given(groups(identical=True), st.sampled_from(MEMBERS))
def test_sticky_join_moves_only_to_the_newcomer_and_no_more_than_needed(group, newcomer):
    subscriptions, partitions = group
    if newcomer in subscriptions:
        return
    before = STICKY.assign(subscriptions, partitions)
    joined = {**subscriptions, newcomer: next(iter(subscriptions.values()))}
    after = STICKY.assign(joined, partitions, current=before)
    total = len(expected_partitions(subscriptions, partitions))
    changed = moved(owners(before), after)
    assert changed == after[newcomer]
    assert len(changed) == total // (len(subscriptions) + 1)
    assert len(changed) <= math.ceil(total / (len(subscriptions) + 1))


@given(groups(identical=True), st.data())
def test_sticky_leave_moves_only_the_leavers_partitions(group, data):
    subscriptions, partitions = group
    if len(subscriptions) < 2:
        return
    before = STICKY.assign(subscriptions, partitions)
    leaver = data.draw(st.sampled_from(sorted(subscriptions)))
    remaining = {m: t for m, t in subscriptions.items() if m != leaver}
    after = STICKY.assign(remaining, partitions, current=before)
    assert moved(owners(before), after) == before[leaver]


@given(data=st.data())
def test_sticky_moves_nothing_when_nothing_changed(data):
    subscriptions, partitions = data.draw(groups())
    current = data.draw(st.none() | currents(subscriptions, partitions))
    first = STICKY.assign(subscriptions, partitions, current=current)
    assert STICKY.assign(subscriptions, partitions, current=first) == first


def test_sticky_ignores_departed_members_and_vanished_partitions():
    current = {
        "a": frozenset({("t", 0), ("t", 1), ("t", 7)}),  # t7 no longer exists
        "b": frozenset({("t", 2), ("u", 0)}),  # b no longer consumes u
        "gone": frozenset({("t", 3)}),
    }
    result = STICKY.assign({"a": {"t"}, "b": {"t"}}, {"t": 4, "u": 1}, current=current)
    assert result == {"a": frozenset({("t", 0), ("t", 1)}), "b": frozenset({("t", 2), ("t", 3)})}


def test_sticky_new_partitions_go_to_the_emptiest_members():
    current = {"a": frozenset({("t", 0), ("t", 1)}), "b": frozenset({("t", 2)})}
    result = STICKY.assign({"a": {"t"}, "b": {"t"}}, {"t": 6}, current=current)
    assert result["a"] >= current["a"] and result["b"] >= current["b"]
    assert counts(result) == {"a": 3, "b": 3}


def test_sticky_moves_through_a_chain_when_no_direct_move_exists():
    # c can take only u; a holds the surplus of t. The even result needs a to
    # give t to b and b to give u to c.
    current = {"a": frozenset({("t", 0), ("t", 1), ("t", 2)}), "b": frozenset({("u", 0)})}
    subscriptions = {"a": {"t"}, "b": {"t", "u"}, "c": {"u"}}
    result = STICKY.assign(subscriptions, {"t": 3, "u": 1}, current=current)
    assert counts(result) == {"a": 2, "b": 1, "c": 1}
    assert result["c"] == {("u", 0)}
    assert len(moved(owners(current), result)) == 2


def test_sticky_a_hundred_members_one_joins():
    members = [f"c{i:03d}" for i in range(100)]
    subscriptions = {m: {"t"} for m in members}
    before = STICKY.assign(subscriptions, {"t": 1000})
    after = STICKY.assign({**subscriptions, "c100": {"t"}}, {"t": 1000}, current=before)
    assert len(moved(owners(before), after)) == len(after["c100"]) == 9
    assert max(counts(after).values()) - min(counts(after).values()) <= 1


# --- choosing a strategy ------------------------------------------------------


def test_rolling_change_from_range_to_sticky():
    old, rolling, new = ["range"], ["sticky", "range"], ["sticky"]
    assert choose_strategy([old, old, old]) == "range"
    assert choose_strategy([rolling, old, old]) == "range"
    assert choose_strategy([rolling, rolling, old]) == "range"
    assert choose_strategy([rolling, rolling, rolling]) == "sticky"
    assert choose_strategy([new, rolling, rolling]) == "sticky"
    assert choose_strategy([new, new, new]) == "sticky"


def test_choose_strategy_sums_ranks_and_breaks_ties_by_name():
    # roundrobin ranks 1+1+0 = 2; sticky 0+2+2 = 4; range 2+0+1 = 3.
    votes = [["sticky", "roundrobin", "range"], ["range", "roundrobin", "sticky"], ["roundrobin", "range", "sticky"]]
    assert choose_strategy(votes) == "roundrobin"
    assert choose_strategy([["sticky", "range"], ["range", "sticky"]]) == "range"


def test_choose_strategy_counts_only_known_strategies():
    assert choose_strategy([["custom", "sticky"], ["custom", "sticky"]]) == "sticky"


@pytest.mark.parametrize(
    "preferences", [[], [["range"], []], [["range"], ["sticky"]], [["custom"], ["custom"]]], ids=str
)
def test_no_common_strategy_is_a_typed_error(preferences):
    with pytest.raises(NoCommonStrategyError) as raised:
        choose_strategy(preferences)
    assert isinstance(raised.value, ZkcoordError)
    assert not raised.value.retriable


# --- worked examples in the docstrings ----------------------------------------


def test_docstring_examples_run_and_every_strategy_has_one():
    finder = doctest.DocTestFinder()
    with_examples = {t.name.rsplit(".", 1)[-1] for t in finder.find(assignors) if t.examples}
    assert {"RangeAssignor", "RoundRobinAssignor", "StickyAssignor", "choose_strategy"} <= with_examples
    results = doctest.testmod(assignors)
    assert results.attempted > 0 and results.failed == 0
