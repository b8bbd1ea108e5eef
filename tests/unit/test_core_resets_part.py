"""Offset resets alone (core/resets.py, on the parts below it): checked, committed at once or by a round, or refused."""

from zkcoord import wire
from zkcoord.coordinator.core.resets import Resets
from zkcoord.coordinator.core.retention import Retention

from tests.unit.parts_kit import Kit

P0 = ("t", 0)


def kit_with_resets() -> tuple[Kit, Resets]:
    kit = Kit()
    membership = kit.build_membership()
    retention = Retention(kit.config, kit.office, kit.out, kit.groups, kit.offsets, kit.rounds,
                          membership.registering_in)
    return kit, Resets(kit.office, kit.out, kit.groups, kit.offsets, kit.log_ends, kit.rounds, retention.empty)


def reset(kit: Kit, resets: Resets, conn: str, offsets: dict, execute=True, force=False) -> wire.ResetOffsetsResponse:
    resets.reset_offsets(conn, wire.ResetOffsetsRequest(group_id="g", offsets=wire.offset_entries(offsets),
                                                        execute=execute, force=force), 5, kit.now)
    kit.settle()
    (answer, _), = kit.sent[conn]
    assert conn in kit.closed
    return answer


def test_a_group_without_members_has_its_offsets_moved_at_once_and_is_told_where_they_were():
    kit, resets = kit_with_resets()
    kit.zk.offsets["g"][P0] = 50
    answer = reset(kit, resets, "op", {P0: 40})
    assert answer.error_code == wire.ErrorCode.NONE and wire.offsets_of(answer.previous) == {P0: 50}
    assert kit.zk.offsets["g"][P0] == 40  # backwards: only an operator moves it so


def test_a_bad_reset_is_refused_with_its_error_and_writes_nothing():
    kit, resets = kit_with_resets()
    assert reset(kit, resets, "a", {("nope", 0): 1}).error_code == wire.ErrorCode.UNKNOWN_PARTITION
    assert reset(kit, resets, "b", {("t", 9): 1}).error_code == wire.ErrorCode.UNKNOWN_PARTITION
    kit.zk.log_ends[P0] = 10
    assert reset(kit, resets, "c", {P0: 11}).error_code == wire.ErrorCode.OFFSET_OUT_OF_RANGE
    assert not kit.zk.writes


def test_a_group_with_members_is_reset_only_if_forced_and_then_by_its_next_round():
    kit, resets = kit_with_resets()
    kit.join("m")
    assert reset(kit, resets, "a", {P0: 1}).error_code == wire.ErrorCode.GROUP_NOT_EMPTY
    resets.reset_offsets("b", wire.ResetOffsetsRequest(group_id="g", offsets=wire.offset_entries({P0: 1}),
                                                       execute=True, force=True), 5, kit.now)
    kit.settle()
    assert kit.rounds.under_way("g") and not kit.sent["b"]  # answered by the round, once written
    kit.advance(1.0, serve=("m",))
    (answer, _), = kit.sent["b"]
    assert answer.error_code == wire.ErrorCode.NONE and kit.zk.offsets["g"][P0] == 1
