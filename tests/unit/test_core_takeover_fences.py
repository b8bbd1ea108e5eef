"""A successor never fences for less than a member of its predecessor may hold.

A state node that does not decode (corrupt, or written by a newer zkcoord in
a rolling downgrade) says neither who runs what nor for how long; a state
without a lease (written before leases were persisted) says who, not how
long. Both are fenced for the longest session timeout the coordinator
accepts, plus the margin.
"""

from __future__ import annotations

from zkcoord import wire
from zkcoord.coordinator.lease import WHOLE_GROUP
from zkcoord.zk import layout

from tests.unit.core_harness import CONFIG, MARGIN, P, CoreHarness, FakeZooKeeper, proofs

LONGEST = CONFIG.max_session_timeout_ms / 1000.0


def first_start(h: CoreHarness):
    return min((t for t, _c, m in h.log if isinstance(m, wire.StartRequest)), default=None)


def test_an_unreadable_state_fences_the_whole_group_for_the_longest_lease():
    zk = FakeZooKeeper(owners={"g": {tp: "old" for tp in P}})
    h = CoreHarness(states={"g": None}, zk=zk)
    assert WHOLE_GROUP in h.core.groups["g"].fences.holders()
    h.register("c", "c")
    h.advance(LONGEST + MARGIN - 0.01, serve=("c",))
    assert first_start(h) is None  # whoever the old members were, they may still be fetching
    h.advance(1.0, serve=("c",))
    assert first_start(h) >= LONGEST + MARGIN - 1e-9
    assert h.running("c") == set(P)
    state = h.zk.states["g"]  # written anew, readable
    assert state.assignment == {"c": tuple(P)} and h.zk.owners["g"] == {tp: "c" for tp in P}


def test_a_member_proving_its_incarnation_does_not_lift_a_whole_group_fence():
    # Nothing says it was the only one running anything.
    h = CoreHarness(states={"g": None})
    h.register("a", "a")
    h.advance(LONGEST / 2, serve=("a",))
    assert first_start(h) is None


def test_an_unreadable_state_with_nobody_coming_back_is_written_anew_once_the_fence_ends():
    h = CoreHarness(states={"g": None}, zk=FakeZooKeeper(owners={"g": {P[0]: "old"}}))
    h.advance(LONGEST + MARGIN + 1.0)
    assert h.zk.states["g"].assignment == {} and h.zk.owners["g"] == {}


def returned_by(lease: float) -> float:
    """Until when a successor keeps a persisted member's partitions for it:
    its lease, then the time to come back (a registration waited out at the
    predecessor, and a retry)."""
    return lease + MARGIN + lease + wire.MEMBER_RETRY_MAX_S


def test_a_state_without_a_lease_fences_for_the_longest_lease_not_the_margin_alone():
    state = layout.GroupState(3, "range", {"a": tuple(P)}, lease_ms=0)  # as older versions wrote it
    h = CoreHarness(states={"g": state})
    h.register("c", "c")
    h.advance(returned_by(LONGEST) + 1.0, serve=("c",))
    assert first_start(h) >= returned_by(LONGEST) - 1e-9


def test_a_state_with_a_lease_keeps_what_a_member_ran_for_its_lease_and_its_return():
    # A member of the predecessor, alive, may spend its session timeout
    # waiting for a paused predecessor to answer its registration before it
    # finds the successor: its partitions are still its own when it does.
    state = layout.GroupState(3, "range", {"a": tuple(P)}, lease_ms=3000, proofs=proofs("a"))
    h = CoreHarness(states={"g": state})
    h.register("c", "c")
    h.advance(returned_by(3.0) - 0.1, serve=("c",))
    assert first_start(h) is None
    h.register("a", "a")  # back just in time: everything is its own again, from its handover
    h.advance(1.0, serve=("a", "c"))
    assert h.running("a") and first_start(h) < returned_by(3.0) + 0.5


def test_a_persisted_member_that_never_comes_back_keeps_the_group_waiting_no_longer_than_its_return():
    state = layout.GroupState(3, "range", {"a": tuple(P)}, lease_ms=3000, proofs=proofs("a"))
    h = CoreHarness(states={"g": state})
    h.register("c", "c")
    h.advance(returned_by(3.0) + 1.0, serve=("c",))
    assert returned_by(3.0) - 1e-9 <= first_start(h) < returned_by(3.0) + 0.5 and h.running("c") == set(P)


def test_a_slot_just_taken_over_is_not_settled_until_its_fences_have_run_out():
    # The server hands a slot over to balance only once it is settled: a
    # second takeover while these fences run would make the group wait twice.
    state = layout.GroupState(3, "range", {"a": tuple(P)}, lease_ms=3000, proofs=proofs("a"))
    h = CoreHarness(states={"g": state})
    h.register("c", "c")
    h.advance(returned_by(3.0) - 0.1, serve=("c",))
    assert not h.core.settled(h.now)
    h.advance(1.0, serve=("c",))
    assert h.running("c") == set(P) and h.core.settled(h.now)


def test_a_settled_coordinator_is_unsettled_by_a_change_until_its_round_ends():
    h = CoreHarness()
    h.register("a", "a")
    session = h.core.groups["g"].members["a"].session_timeout
    h.advance(session - 0.5, serve=("a",))
    # Stable, but younger than its members' session: a stock client that
    # followed the slot here may still have a registration at the broker it left.
    assert h.running("a") and not h.core.settled(h.now)
    h.advance(1.0, serve=("a",))
    assert h.core.settled(h.now)
    h.register("b", "b")
    assert not h.core.settled(h.now)
    h.advance(1.0, serve=("a", "b"))
    # Its round has ended, but "b" is younger than a session: it may be a
    # stock client that followed the slot here, its registration at the
    # broker it left still waiting out its session.
    assert h.running("a") and h.running("b") and not h.core.settled(h.now)
    h.advance(session - 1.0, serve=("a", "b"))
    assert h.core.settled(h.now)
