"""The rebalance planner: subscriptions, the target assignment, and seed 001's
"is a rebalance necessary" checks (3.1 to 3.5) plus the check that every
connected member runs its assignment; then the handoff plan that carries a
change out without a partition ever running on two members.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zkcoord.coordinator.planner import (
    Subscription, owners_of, plan_handoff, rebalance_reason, target_assignment,
)

T0, T1, T2, T3 = ("t", 0), ("t", 1), ("t", 2), ("t", 3)


# -- subscriptions --------------------------------------------------------------------------

def test_named_topics_match_exactly():
    sub = Subscription(frozenset({"orders"}))
    assert sub.matches("orders")
    assert not sub.matches("orders-eu")
    assert not sub.matches("order")


def test_a_pattern_must_match_the_whole_topic_name():
    sub = Subscription(pattern=r"w-\d+")
    assert sub.matches("w-1") and sub.matches("w-42")
    assert not sub.matches("w-1x")  # a prefix match is not enough
    assert not sub.matches("xw-1")
    assert not sub.matches("w-")


def test_named_topics_and_a_pattern_together():
    sub = Subscription(frozenset({"audit"}), r"w-.*")
    assert sub.select(["audit", "w-1", "w-2", "other"]) == {"audit", "w-1", "w-2"}


def test_select_only_returns_topics_that_exist():
    sub = Subscription(frozenset({"later", "now"}))
    assert sub.select({"now": 3}) == {"now"}
    assert sub.select({}) == frozenset()


# -- target assignment -------------------------------------------------------------------------

def test_target_assignment_follows_the_strategy():
    subs = {"a": Subscription(frozenset({"t"})), "b": Subscription(frozenset({"t"}))}
    assert target_assignment(subs, {"t": 4}, "range") == {
        "a": frozenset({T0, T1}), "b": frozenset({T2, T3})}
    assert target_assignment(subs, {"t": 4}, "roundrobin") == {
        "a": frozenset({T0, T2}), "b": frozenset({T1, T3})}


def test_a_topic_that_does_not_exist_yet_gives_no_partitions():
    subs = {"a": Subscription(frozenset({"t", "not-yet"})), "b": Subscription(frozenset({"not-yet"}))}
    target = target_assignment(subs, {"t": 2})
    assert target == {"a": frozenset({T0, T1}), "b": frozenset()}


def test_a_wildcard_member_gets_every_matching_topic_and_nothing_else():
    subs = {"w": Subscription(pattern=r"w-.*"), "n": Subscription(frozenset({"other"}))}
    target = target_assignment(subs, {"w-1": 1, "w-2": 2, "other": 1, "x": 5})
    assert target == {
        "w": frozenset({("w-1", 0), ("w-2", 0), ("w-2", 1)}),
        "n": frozenset({("other", 0)}),
    }


def test_sticky_keeps_what_it_can_of_the_current_assignment():
    subs = {m: Subscription(frozenset({"t"})) for m in ("a", "b", "c")}
    current = {"a": frozenset({T0, T3}), "b": frozenset({T1, T2})}
    target = target_assignment(subs, {"t": 4}, "sticky", current)
    assert sorted(len(tps) for tps in target.values()) == [1, 1, 2]
    # The newcomer takes exactly one partition; the others keep the rest.
    assert len(target["c"]) == 1
    assert target["a"] | target["b"] | target["c"] == {T0, T1, T2, T3}
    assert target["a"] <= current["a"] and target["b"] <= current["b"]


def test_an_unknown_strategy_is_refused():
    with pytest.raises(KeyError):
        target_assignment({"a": Subscription(frozenset({"t"}))}, {"t": 1}, "no-such-strategy")


def test_owners_of_inverts_an_assignment():
    assert owners_of({"a": frozenset({T0, T1}), "b": frozenset({T2}), "c": frozenset()}) == {
        T0: "a", T1: "a", T2: "b"}


# -- is a rebalance necessary (seed 001 step 3) -----------------------------------------------------

TARGET = {"a": frozenset({T0, T1}), "b": frozenset({T2})}
RECORDED = {T0: "a", T1: "a", T2: "b"}
RUNNING = {"a": frozenset({T0, T1}), "b": frozenset({T2})}


def test_no_rebalance_when_zookeeper_and_the_members_agree_with_the_target():
    assert rebalance_reason(TARGET, RECORDED, RUNNING) is None


def test_3_1_no_ownership_recorded():
    assert rebalance_reason(TARGET, {}, RUNNING) == "no ownership recorded"


def test_nothing_to_own_and_nothing_recorded_needs_no_rebalance():
    # A group whose topics do not exist yet: no partitions, no owners.
    assert rebalance_reason({"a": frozenset(), "b": frozenset()}, {}, {"a": frozenset()}) is None


def test_3_2_some_partitions_not_owned():
    # A partition was added to the topic: the target has it, ZooKeeper does not.
    target = {"a": frozenset({T0, T1}), "b": frozenset({T2, T3})}
    assert rebalance_reason(target, RECORDED, RUNNING) == "1 partition(s) not owned"


def test_3_3_owned_partitions_that_no_longer_exist():
    recorded = {**RECORDED, T3: "b", ("gone", 0): "a"}
    assert rebalance_reason(TARGET, recorded, RUNNING) == "2 owned partition(s) no longer assigned"


def test_3_4_ownership_differs_from_the_new_assignment():
    # A member joined: the same partitions, other owners.
    recorded = {T0: "a", T1: "b", T2: "b"}
    assert rebalance_reason(TARGET, recorded, RUNNING) == "ownership differs from the new assignment"


def test_a_member_that_does_not_run_its_assignment():
    # After a failover ZooKeeper already records the target, but the
    # freshly registered member runs nothing.
    running = {"a": frozenset(), "b": frozenset({T2})}
    assert rebalance_reason(TARGET, RECORDED, running) == "member a does not run its assignment"


def test_a_member_running_more_than_its_assignment():
    running = {"a": frozenset({T0, T1, T2}), "b": frozenset({T2})}
    assert rebalance_reason(TARGET, RECORDED, running) == "member a does not run its assignment"


def test_a_member_away_keeps_its_partitions_without_a_rebalance():
    # A static member whose connection is gone is not in ``running``.
    assert rebalance_reason(TARGET, RECORDED, {"b": frozenset({T2})}) is None


def test_unowned_partitions_are_reported_before_other_differences():
    recorded = {T0: "b", ("gone", 0): "a"}
    assert rebalance_reason(TARGET, recorded, {}) == "2 partition(s) not owned"


members = st.sampled_from(["a", "b", "c", "d"])
partitions = st.tuples(st.sampled_from(["t", "u"]), st.integers(0, 3))


@st.composite
def situations(draw):
    """A target (partitions unique to one member), a recorded owner map and
    what the connected members run, each sometimes equal to the target."""
    owners = draw(st.dictionaries(partitions, members, max_size=8))
    names = draw(st.frozensets(members, min_size=1)) | set(owners.values())
    target = {m: frozenset(tp for tp, o in owners.items() if o == m) for m in names}
    recorded = dict(owners) if draw(st.booleans()) else draw(st.dictionaries(partitions, members, max_size=8))
    running = {}
    for m in names:
        choice = draw(st.sampled_from(["same", "other", "away"]))
        if choice == "same":
            running[m] = target[m]
        elif choice == "other":
            running[m] = draw(st.frozensets(partitions, max_size=4))
    return target, recorded, running


@given(situations())
def test_a_rebalance_is_needed_exactly_when_something_disagrees_with_the_target(situation):
    target, recorded, running = situation
    agrees = owners_of(target) == recorded and all(
        running[m] == tps for m, tps in target.items() if m in running)
    reason = rebalance_reason(target, recorded, running)
    assert (reason is None) == agrees, (reason, target, recorded, running)


# -- the handoff plan ---------------------------------------------------------------------------------

assignments = st.dictionaries(
    members, st.frozensets(st.tuples(st.just("t"), st.integers(0, 7)), max_size=5), min_size=1)


def _exclusive(assignment):
    tps = [tp for part in assignment.values() for tp in part]
    return len(tps) == len(set(tps))


@given(assignments, assignments, st.booleans())
def test_carrying_out_a_plan_never_runs_a_partition_twice_and_reaches_the_target(before, after, eager):
    # Both ends are valid assignments: each partition on one member at most.
    seen: set = set()
    running = {m: frozenset(tp for tp in tps if tp not in seen and not seen.add(tp)) for m, tps in before.items()}
    seen = set()
    target = {m: frozenset(tp for tp in tps if tp not in seen and not seen.add(tp)) for m, tps in after.items()}
    plan = plan_handoff(target, running, eager=eager)
    for member, tps in plan.revoke.items():
        assert tps and tps <= running[member]  # only what the member runs
    after_stops = {m: tps - plan.revoke.get(m, frozenset()) for m, tps in running.items()}
    assert _exclusive(after_stops)
    # Starts go out one by one, in any order; at every step nobody shares a partition.
    state = dict(after_stops)
    for member, tps in plan.start.items():
        state[member] = tps
        assert _exclusive(state), (plan, running, target)
    empty = frozenset()
    assert all(state[m] == target.get(m, empty) for m in running)
    assert plan.paused == frozenset().union(*plan.revoke.values())
    if eager:
        assert plan.revoke_all and set(plan.start) == set(running)
    else:
        # Incremental: a partition that stays with its member is never paused.
        for m, tps in running.items():
            assert not (tps & target.get(m, empty)) & plan.revoke.get(m, empty)


def test_incremental_handoff_moves_only_what_changes():
    plan = plan_handoff({"a": frozenset({T0}), "b": frozenset({T1}), "c": frozenset({T2})},
                        {"a": frozenset({T0, T1}), "b": frozenset(), "c": frozenset({T2})})
    assert plan.revoke == {"a": frozenset({T1})}
    assert plan.start == {"b": frozenset({T1})}
    assert plan.paused == {T1} and not plan.revoke_all
