"""Offsets alone (core/offsets.py): taken from members, checked, written one write at a time per group."""

from zkcoord import wire
from zkcoord.coordinator import actions
from zkcoord.coordinator.core.offsets import Suspended

from tests.unit.parts_kit import Kit, member

P0, P1, P2 = ("t", 0), ("t", 1), ("t", 2)


def test_only_owned_partitions_are_taken_never_backwards_and_never_a_negative_offset():
    kit = Kit()
    offsets = kit.build_offsets()
    group = kit.groups.named("g")
    a = member("a")
    offsets.committed["g"] = {P0: 20}
    taken = offsets.accept(group, a, {P0: 15, P1: 30, P2: 5, ("t", 3): -2}, owned=frozenset({P0, P1, ("t", 3)}))
    assert taken == 1 and offsets.pending["g"] == {P1: 30}
    assert offsets.accept(group, a, {P1: 29}, owned=frozenset({P1})) == 0  # below what is pending


def test_unknown_nodes_are_read_first_and_one_write_at_a_time_each_waiter_after_a_write_begun_after_it():
    kit = Kit()
    offsets = kit.build_offsets()
    group = kit.groups.named("g")
    kit.zk.offsets["g"][P0] = 3
    offsets.override(group, {P0: 7, P1: 9})
    ended = []
    offsets.flush("g", kit.now, [lambda error, now: ended.append(("first", error))])
    done = kit.settle(answers=2)  # the nodes read, the log ends learnt: the write is out
    offsets.override(group, {P1: 11})
    offsets.flush("g", kit.now, [lambda error, now: ended.append(("second", error))])
    done += kit.settle()
    writes = [a for a in done if isinstance(a, actions.WriteOffsets)]
    assert [dict(w.offsets) for w in writes] == [{P0: 7, P1: 9}, {P1: 11}]
    assert writes[0].existing == {P0} and writes[1].existing == {P1}  # created once, then set
    assert ended == [("first", None), ("second", None)]
    assert offsets.committed["g"] == {P0: 7, P1: 11} and not offsets.pending["g"] and not offsets.flushing


def test_an_offset_beyond_its_partitions_log_end_is_refused_and_its_member_told_and_dropped():
    kit = Kit()
    offsets = kit.build_offsets()
    kit.build_requests()
    (a,) = kit.join("a")
    kit.zk.log_ends[P0] = 5
    offsets.accept(kit.groups.by_name["g"], a, {P0: 8, P1: 4}, owned=frozenset({P0, P1}))
    offsets.flush("g", kit.now)
    kit.settle()
    assert kit.zk.offsets["g"] == {P1: 4} and offsets.log_ends.of(P0) == 5
    (error, _), = kit.sent["a"]
    assert error.error_code == wire.ErrorCode.OFFSET_OUT_OF_RANGE
    assert kit.dropped == [("a", "it reported offset 8 for t-0 is beyond the partition's log end 5")]


def test_nothing_is_written_out_of_office_and_whoever_waits_is_told():
    kit = Kit()
    offsets = kit.build_offsets()
    offsets.override(kit.groups.named("g"), {P0: 1})
    kit.office.session_suspended()
    ended = []
    offsets.flush("g", kit.now, [lambda error, now: ended.append(error)])
    offsets.flush_pending(kit.now)
    assert isinstance(ended[0], Suspended) and not kit.settle() and offsets.pending["g"] == {P0: 1}
