"""Forgetting empty groups (core.py, Kafka's offsets.retention.minutes), on a
manual clock: a group with no members and no committed offsets is forgotten
once it has stayed empty for the retention, in memory and in ZooKeeper; one
with committed offsets is kept; a member joining meanwhile restarts the
wait; nobody joins while its nodes are being deleted; a successor does not
load what was forgotten."""

import dataclasses

from zkcoord import wire
from zkcoord.coordinator import actions
from zkcoord.zk import layout

from tests.unit.core_harness import CONFIG, CoreHarness, FakeZooKeeper

RETENTION_S = 30.0
RETAINING = dataclasses.replace(CONFIG, group_retention_ms=int(RETENTION_S * 1000))


def emptied(offsets=None) -> CoreHarness:
    """A group whose one member left cleanly (reporting ``offsets``, if any); written empty."""
    h = CoreHarness(RETAINING)
    h.register("a", "a")
    h.stable(["a"])
    h.answer("a", wire.LeaveGroupRequest(offsets=wire.offset_entries(offsets or {})), correlation_id=5)
    h.advance(0.5)
    assert h.zk.states["g"].assignment == {} and "g" in h.core.groups
    return h


def test_a_group_without_members_or_offsets_is_forgotten_after_its_retention():
    h = emptied()
    h.advance(RETENTION_S - 1)
    assert "g" in h.core.groups and "g" in h.zk.states
    h.advance(2)
    assert "g" not in h.core.groups and "g" not in h.zk.states
    assert [w.group for w in h.zk.writes if isinstance(w, actions.ForgetGroup)] == ["g"]
    # A newcomer makes a new group, from generation 1.
    h.register("b", "b")
    h.stable(["b"])
    assert h.zk.states["g"].generation == 1 and h.running("b")


def test_a_group_with_committed_offsets_is_kept():
    h = emptied({("t", 0): 7})
    h.advance(RETENTION_S * 3)
    assert "g" in h.core.groups and "g" in h.zk.states and h.zk.offsets["g"] == {("t", 0): 7}
    assert not any(isinstance(w, actions.ForgetGroup) for w in h.zk.writes)


def test_a_group_with_offsets_this_coordinator_never_saw_is_kept():
    h = emptied()
    h.zk.offsets["g"][("t", 1)] = 3  # written by a predecessor, never read here
    h.advance(RETENTION_S + 1)
    assert "g" in h.core.groups and "g" in h.zk.states


def test_a_member_joining_before_the_retention_restarts_it():
    h = emptied()
    h.advance(RETENTION_S - 5)
    h.register("b", "b")
    h.stable(["b"])
    h.advance(10, serve=("b",))
    assert "g" in h.core.groups  # it has a member
    h.answer("b", wire.LeaveGroupRequest(offsets=()), correlation_id=6)
    h.advance(RETENTION_S - 1)
    assert "g" in h.core.groups
    h.advance(2)
    assert "g" not in h.core.groups


def test_nobody_joins_while_a_group_is_being_forgotten():
    h = emptied()
    h.advance(RETENTION_S + 0.01, settle=False)
    h.complete(actions.ReadOffsets, result={})
    assert any(isinstance(op, actions.ForgetGroup) for op in h.operations.values())
    h.register("b", "b")
    (answer, _), = h.sent["b"]
    assert answer.error_code == wire.ErrorCode.COORDINATOR_NOT_AVAILABLE and "forgotten" in answer.error_message
    h.settle()
    assert "g" not in h.core.groups
    h.register("c", "c")
    assert h.sent["c"][0][0].error_code == wire.ErrorCode.NONE


def test_a_failed_deletion_keeps_the_group_and_tries_again():
    h = emptied()
    h.advance(RETENTION_S + 0.01, settle=False)
    h.complete(actions.ReadOffsets, result={})
    h.complete(actions.ForgetGroup, error=ConnectionError("ZooKeeper went away"))
    assert "g" in h.core.groups
    h.advance(RETENTION_S + 1)
    assert "g" not in h.core.groups and "g" not in h.zk.states


def test_a_successor_forgets_a_loaded_empty_group_and_never_loads_it_again():
    zk = FakeZooKeeper()
    zk.states["old"] = layout.GroupState(4, "range", {}, lease_ms=3000)
    h = CoreHarness(RETAINING, zk=zk, states=dict(zk.states))
    assert "old" in h.core.groups
    h.advance(RETENTION_S + 1)
    assert "old" not in h.core.groups and "old" not in zk.states
    successor = CoreHarness(RETAINING, epoch=2, zk=zk, states=dict(zk.states))
    assert "old" not in successor.core.groups


def test_a_dry_run_reset_of_a_group_that_never_was_leaves_nothing_behind():
    h = CoreHarness(RETAINING)
    h.apply(h.core.reset_offsets("op", wire.ResetOffsetsRequest(group_id="nobody", execute=False), 9, h.now))
    h.settle()
    assert "nobody" in h.core.groups
    h.advance(RETENTION_S + 1)
    assert "nobody" not in h.core.groups


def test_with_offset_expiry_a_group_with_offsets_is_forgotten_with_them():
    h = CoreHarness(dataclasses.replace(RETAINING, expire_offsets=True))
    h.zk.offsets["g"][("t", 1)] = 3  # one never read here goes too
    h.register("a", "a")
    h.stable(["a"])
    h.answer("a", wire.LeaveGroupRequest(offsets=wire.offset_entries({("t", 0): 7})), correlation_id=5)
    h.advance(RETENTION_S - 1)
    assert h.zk.offsets["g"] == {("t", 0): 7, ("t", 1): 3}
    h.advance(2)
    assert "g" not in h.core.groups and "g" not in h.zk.states and not h.zk.offsets.get("g")
    assert [(w.group, w.offsets) for w in h.zk.writes if isinstance(w, actions.ForgetGroup)] == [("g", True)]
    assert "g" not in h.core.committed
