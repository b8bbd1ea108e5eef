"""An operator's offset reset through the coordinator (core.py reset_offsets),
on a manual clock: a dry run changes nothing, a reset of a group without
members moves offsets (backwards too), a group with members is refused
unless forced, and a forced reset stops the owners, writes, and starts them
from the new offsets. Every refusal leaves the stored offsets as they were."""

import pytest

from zkcoord import wire
from zkcoord.coordinator import actions

from tests.unit.core_harness import CONFIG, P, CoreHarness

OP = "operator"  # the operator's connection


def reset(h: CoreHarness, offsets=None, execute=True, force=False, group="g", conn=OP, partitions=None):
    """Send a ResetOffsetsRequest; returns the answer once ZooKeeper and the members have settled it."""
    entries = tuple(wire.TopicPartitionOffset(t, p, o) for (t, p), o in sorted((offsets or {}).items()))
    entries += tuple(wire.TopicPartitionOffset(t, p, -1) for t, p in partitions or ())
    before = len(h.sent[conn])
    h.apply(h.core.reset_offsets(conn, wire.ResetOffsetsRequest(group_id=group, execute=execute, force=force,
                                                               offsets=entries), 9, h.now))
    h.settle()
    answers = [m for m, c in h.sent[conn][before:] if isinstance(m, wire.ResetOffsetsResponse) and c == 9]
    return answers[0] if answers else None


def left_group() -> CoreHarness:
    """a consumed to 40.. and left cleanly: the group is empty."""
    h = CoreHarness()
    h.register("a", "a")
    h.stable(["a"])
    h.answer("a", wire.LeaveGroupRequest(offsets=wire.offset_entries({tp: 40 + i for i, tp in enumerate(P)})),
             correlation_id=5)
    h.settle()
    h.advance(0.5)
    return h


def test_a_dry_run_reports_the_committed_offsets_and_changes_nothing():
    h = left_group()
    writes = len(h.zk.writes)
    answer = reset(h, {P[0]: 3}, execute=False)
    assert answer.error_code == wire.ErrorCode.NONE and answer.members == ()
    assert wire.offsets_of(answer.previous) == {P[0]: 40}
    assert len(h.zk.writes) == writes and OP in h.closed
    everything = reset(h, execute=False, conn="op2")  # no partition named: every one the group has
    assert wire.offsets_of(everything.previous) == {tp: 40 + i for i, tp in enumerate(P)}


def test_a_dry_run_reads_offsets_the_coordinator_has_not_seen():
    h = CoreHarness()
    h.zk.offsets["g"].update({P[1]: 17})
    answer = reset(h, execute=False)
    assert wire.offsets_of(answer.previous) == {P[1]: 17}


def test_a_group_without_members_is_reset_backwards_and_answered_once_written():
    h = left_group()
    h.apply(h.core.reset_offsets(OP, wire.ResetOffsetsRequest(
        group_id="g", execute=True, offsets=wire.offset_entries({P[0]: 3, P[1]: 0})), 9, h.now))
    (write,) = [op for op in h.operations.values() if isinstance(op, actions.WriteOffsets)]
    assert dict(write.offsets) == {P[0]: 3, P[1]: 0}
    assert not h.sent[OP]  # answered only once the write is durable
    h.settle()
    (answer, _), = h.sent[OP]
    assert answer.error_code == wire.ErrorCode.NONE and wire.offsets_of(answer.previous) == {P[0]: 40, P[1]: 41}
    assert h.zk.offsets["g"] == {P[0]: 3, P[1]: 0, P[2]: 42, P[3]: 43}
    h.register("b", "b")  # the next owner starts exactly there
    h.advance(1.0, serve=("b",))
    (start,) = h.requests("b", wire.StartRequest)
    assert {(p.topic, p.partition): p.offset for p in start.partitions} == {P[0]: 3, P[1]: 0, P[2]: 42, P[3]: 43}


def test_a_group_with_members_is_refused_and_nothing_changes():
    h = CoreHarness()
    h.register("a", "a")
    h.register("b", "b")
    h.stable(["a", "b"])
    offsets, writes = dict(h.zk.offsets["g"]), len(h.zk.writes)
    answer = reset(h, {P[0]: 0})
    assert answer.error_code == wire.ErrorCode.GROUP_NOT_EMPTY and answer.members == ("a", "b")
    assert "a, b" in answer.error_message
    assert h.zk.offsets["g"] == offsets and len(h.zk.writes) == writes
    assert h.requests("a", wire.StopRequest) == []


@pytest.mark.parametrize("entries,execute,code", [
    ((wire.TopicPartitionOffset("nope", 0, 1),), True, wire.ErrorCode.UNKNOWN_PARTITION),
    ((wire.TopicPartitionOffset("t", 4, 1),), True, wire.ErrorCode.UNKNOWN_PARTITION),
    ((wire.TopicPartitionOffset("t", -1, 1),), False, wire.ErrorCode.UNKNOWN_PARTITION),
    ((wire.TopicPartitionOffset("t", 0, 1), wire.TopicPartitionOffset("t", 0, 2)), True,
     wire.ErrorCode.INVALID_REQUEST),
    ((wire.TopicPartitionOffset("t", 0, -5),), True, wire.ErrorCode.INVALID_REQUEST),
    ((), True, wire.ErrorCode.INVALID_REQUEST),
])
def test_bad_requests_get_typed_errors_and_change_nothing(entries, execute, code):
    h = left_group()
    offsets, writes = dict(h.zk.offsets["g"]), len(h.zk.writes)
    h.apply(h.core.reset_offsets(OP, wire.ResetOffsetsRequest(group_id="g", execute=execute, offsets=entries),
                                 9, h.now))
    h.settle()
    (answer, _), = h.sent[OP]
    assert answer.error_code == code and answer.error_message and OP in h.closed
    assert h.zk.offsets["g"] == offsets and len(h.zk.writes) == writes


def test_a_bad_group_id_is_an_invalid_request():
    h = CoreHarness()
    answer = reset(h, {P[0]: 1}, group="coordinator")
    assert answer.error_code == wire.ErrorCode.INVALID_REQUEST


def test_a_forced_reset_stops_the_owners_writes_and_starts_them_from_the_new_offsets():
    h = CoreHarness()
    h.register("a", "a")
    h.register("b", "b")
    h.stable(["a", "b"])  # a runs t-0 and t-1, b runs t-2 and t-3
    h.apply(h.core.reset_offsets(OP, wire.ResetOffsetsRequest(
        group_id="g", execute=True, force=True, offsets=wire.offset_entries({P[1]: 2, P[2]: 5})), 9, h.now))
    h.advance(0.1)  # the round's debounce: it stops t-1 on a and t-2 on b, nothing else
    (stop_a, _), = h.unanswered("a")
    (stop_b, _), = h.unanswered("b")
    assert {(p.topic, p.partition) for p in stop_a.partitions} == {P[1]}
    assert {(p.topic, p.partition) for p in stop_b.partitions} == {P[2]}
    h.answer("a", wire.StopResponse(offsets=wire.offset_entries({P[1]: 90})))
    h.answer("b", wire.StopResponse(offsets=wire.offset_entries({P[2]: 91})))
    h.settle()
    (answer, _), = h.sent[OP]  # answered once the new offsets are written, before the Starts are answered
    assert answer.error_code == wire.ErrorCode.NONE and answer.members == ("a", "b")
    assert h.zk.offsets["g"][P[1]] == 2 and h.zk.offsets["g"][P[2]] == 5
    h.advance(0.5, serve=("a", "b"))
    starts = {(p.topic, p.partition): p.offset for conn in "ab" for m in h.requests(conn, wire.StartRequest)
              for p in m.partitions}
    assert starts[P[1]] == 2 and starts[P[2]] == 5
    assert h.running("a") == {P[0], P[1]} and h.running("b") == {P[2], P[3]}
    h.advance(1.0, serve=("a", "b"))
    assert h.zk.offsets["g"][P[1]] == 2  # and nothing since has put the old offsets back


def test_a_forced_reset_whose_round_fails_before_writing_resets_nothing():
    h = CoreHarness()
    h.register("a", "a")
    h.stable(["a"])
    offsets = dict(h.zk.offsets["g"])
    h.apply(h.core.reset_offsets(OP, wire.ResetOffsetsRequest(
        group_id="g", execute=True, force=True, offsets=wire.offset_entries({P[0]: 0})), 9, h.now))
    h.advance(0.1)
    assert isinstance(h.unanswered("a")[0][0], wire.StopRequest)
    h.advance(CONFIG.rebalance_timeout_ms / 1000.0 + 0.1)  # a never answers its Stop
    (answer, _), = h.sent[OP]
    assert answer.error_code == wire.ErrorCode.REBALANCE_IN_PROGRESS and "nothing was reset" in answer.error_message
    assert h.zk.offsets["g"].get(P[0]) == offsets.get(P[0])


def test_a_forced_reset_whose_operator_went_away_before_its_round_is_dropped():
    h = CoreHarness()
    h.register("a", "a")
    h.stable(["a"])
    h.apply(h.core.reset_offsets(OP, wire.ResetOffsetsRequest(
        group_id="g", execute=True, force=True, offsets=wire.offset_entries({P[0]: 0})), 9, h.now))
    h.apply(h.core.connection_closed(OP, h.now))
    h.advance(1.0, serve=("a",))
    assert h.requests("a", wire.StopRequest) == [] and h.zk.offsets["g"].get(P[0]) != 0


def test_a_member_dropped_before_a_reset_cannot_hand_its_old_offsets_over_it():
    h = CoreHarness()
    h.register("a", "a")
    h.stable(["a"])
    h.apply(h.core.connection_closed("a", h.now))  # dropped; it may still be running, fenced
    h.advance(0.2)
    assert reset(h, {tp: 1 for tp in P}).error_code == wire.ErrorCode.NONE
    # It comes back handing over what it consumed meanwhile: stale, the operator's offsets stand.
    h.register("a2", "a", offsets=wire.offset_entries({tp: 70 for tp in P}))
    h.advance(1.0, serve=("a2",))
    assert all(h.zk.offsets["g"][tp] == 1 for tp in P)
    (start,) = h.requests("a2", wire.StartRequest)
    assert {p.offset for p in start.partitions} == {1}


def test_a_reset_during_a_rebalance_is_refused():
    h = CoreHarness()
    h.register("a", "a")
    h.stable(["a"])
    h.answer("a", wire.LeaveGroupRequest(), correlation_id=5)
    h.settle()
    h.advance(0.1, settle=False)  # the round writing the group empty is under way
    assert any(isinstance(op, actions.WriteGroupState) for op in h.operations.values())
    h.apply(h.core.reset_offsets(OP, wire.ResetOffsetsRequest(
        group_id="g", execute=True, offsets=wire.offset_entries({P[0]: 0})), 9, h.now))
    (answer, _), = h.sent[OP]
    assert answer.error_code == wire.ErrorCode.REBALANCE_IN_PROGRESS
