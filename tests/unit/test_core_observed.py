"""The core's small parts alone: the census of groups and members
(observed.py), the table of groups (groups.py) and the outbox (outbox.py)."""

from __future__ import annotations

from zkcoord.coordinator.core.groups import GroupTable
from zkcoord.coordinator.core.observed import MEMBER_STATES, census_of, empty_census
from zkcoord.coordinator.core.outbox import Outbox
from zkcoord.coordinator.group import GroupPhase

from tests.unit.parts_kit import member


def test_the_empty_census_names_every_phase_and_state_at_zero():
    census = empty_census()
    assert census.groups == {phase.value: 0 for phase in GroupPhase}
    assert census.members == dict.fromkeys(MEMBER_STATES, 0)


def test_the_census_counts_groups_by_phase_and_members_by_state():
    table = GroupTable()
    stable, rebalancing = table.named("a"), table.named("b")
    table.named("c")  # empty
    stable.phase, rebalancing.phase = GroupPhase.STABLE, GroupPhase.REBALANCING
    stable.members = {m.member_id: m for m in (member("m1", "a"), member("m2", "a"))}
    away, leaving = member("m3", "b"), member("m4", "b")
    away.connected = False
    leaving.leaving = True
    rebalancing.members = {"m3": away, "m4": leaving}

    census = census_of(table, registering=5)

    assert census.groups == {"empty": 1, "stable": 1, "rebalancing": 1, "failed": 0}
    assert census.members == {"registering": 5, "active": 2, "leaving": 1, "away": 1}


def test_a_group_is_made_once_and_dropped_only_while_it_holds_its_name():
    table = GroupTable()
    first = table.named("g")
    assert table.named("g") is first and table.get("g") is first
    table.drop(first)
    assert table.get("g") is None
    second = table.named("g")
    table.drop(first)  # the forgotten one no longer holds the name: the new one stays
    assert table.get("g") is second and list(table) == [second]


def test_the_outbox_hands_out_actions_in_order_and_each_operations_end_once():
    out = Outbox()
    ended = []
    out.emit("first")
    out.ask(lambda token: ("op", token), lambda result, error, now: ended.append(result))
    assert out.take() == ["first", ("op", 1)]
    assert out.take() == []
    continuation = out.ended(1)
    continuation("done", None, 0.0)
    assert ended == ["done"] and out.ended(1) is None and out.ended(99) is None
    out.emit("dropped")
    out.discard()
    assert out.take() == []
