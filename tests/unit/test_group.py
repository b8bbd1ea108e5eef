"""A group's phase machine: every move the design has is allowed, every other
is refused with a typed error and leaves the group as it was."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from zkcoord.coordinator.group import Group, GroupPhase, IllegalTransition, Member
from zkcoord.coordinator.planner import Subscription
from zkcoord.errors import ZkcoordError

E, S, R, F = GroupPhase.EMPTY, GroupPhase.STABLE, GroupPhase.REBALANCING, GroupPhase.FAILED

# The design, move by move (group.py's GroupPhase docstring and the runtime):
ALLOWED = {
    (E, R),  # a member joins
    (E, E),  # a rebalance of a group that is still empty
    (S, R),  # a member, topic or partition changes
    (S, E),  # the last member leaves
    (E, F),  # a rebalance gave up before it changed anything
    (S, F),  # likewise
    (R, S),  # every member runs its new assignment
    (R, F),  # the rebalance gave up after its retries
    (R, E),  # every member left meanwhile
    (R, R),  # a retry
    (F, R),  # any change tries again
    (F, E),  # every member left
    (F, F),  # a retry after a failure gave up again before changing anything
}


@pytest.mark.parametrize("move", sorted(ALLOWED, key=str), ids=lambda m: f"{m[0].value}->{m[1].value}")
def test_allowed_moves(move):
    group = Group("g", phase=move[0])
    group.transition(move[1])
    assert group.phase is move[1]


REFUSED = sorted(set(itertools.product(GroupPhase, repeat=2)) - ALLOWED, key=str)


@pytest.mark.parametrize("move", REFUSED, ids=lambda m: f"{m[0].value}->{m[1].value}")
def test_refused_moves(move):
    group = Group("g", phase=move[0], generation=7)
    with pytest.raises(IllegalTransition) as caught:
        group.transition(move[1])
    assert isinstance(caught.value, ZkcoordError) and not caught.value.retriable
    assert group.phase is move[0] and group.generation == 7
    assert f"{move[0].value} -> {move[1].value}" in str(caught.value) and "group g" in str(caught.value)


def test_the_refused_moves_are_the_ones_that_reach_stable_without_a_rebalance():
    assert set(REFUSED) == {(E, S), (S, S), (F, S)}


def test_a_new_group_is_empty_at_generation_zero():
    group = Group("g")
    assert group.phase is E and group.generation == 0 and not group.members
    assert group.describe() == "[group g gen 0]"


def test_the_life_of_a_group():
    group = Group("g")
    for phase in (R, S, R, R, F, R, S, E):
        group.transition(phase)
    assert group.phase is E


def _member(member_id: str, subscription: Subscription, running=frozenset()) -> Member:
    return Member(member_id=member_id, group="g", subscription=subscription, session_timeout_ms=3000,
                  max_poll_interval_ms=60_000, auto_commit=True, auto_offset_reset="smallest",
                  is_static=False, strategies=("range",), running=frozenset(running))


def test_subscriptions_and_interest():
    a = _member("a", Subscription(frozenset({"t"})), running={("t", 0)})
    b = _member("b", Subscription(pattern=r"w-.*"), running={("w-1", 0)})
    group = Group("g", members={"a": a, "b": b})
    assert group.subscriptions() == {"a": a.subscription, "b": b.subscription}
    assert group.interested_in("t") and group.interested_in("w-9")
    assert not group.interested_in("u")
    assert a.session_timeout == 3.0


def test_a_group_counts_the_lists_of_strategies_its_members_offer():
    sub = Subscription(frozenset({"t"}))
    a, b = _member("a", sub), dataclasses.replace(_member("b", sub), strategies=("sticky", "range"))
    group = Group("g", members={"a": a})
    assert group.strategy_lists == {("range",): 1}
    group.add_member(b)
    group.add_member(_member("c", sub))
    assert group.strategy_lists == {("range",): 2, ("sticky", "range"): 1}
    group.add_member(_member("b", sub))  # b again, in place of the first b
    assert group.strategy_lists == {("range",): 3} and len(group.members) == 3
    for member_id in ("a", "b", "c", "c"):
        group.remove_member(member_id)
    assert group.strategy_lists == {} and not group.members
