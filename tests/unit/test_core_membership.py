"""Membership alone (core/membership.py, on the parts below it): registration, leaving, dropping, fencing."""

from zkcoord import wire
from zkcoord.coordinator.core.observed import EXPIRED_STATIC
from zkcoord.coordinator.lease import lease_end
from zkcoord.security.principal import ANONYMOUS

from tests.unit.core_harness import CONFIG
from tests.unit.parts_kit import T_MS, Kit

T = T_MS / 1000.0


def registration(member_id: str, **kwargs) -> wire.RegisterConsumerRequest:
    kwargs.setdefault("session_timeout_ms", T_MS)
    return wire.RegisterConsumerRequest(group_id="g", consumer_id=member_id, topics=("t",),
                                        incarnation=f"{member_id}'s incarnation", **kwargs)


def register(kit: Kit, member_id: str, **kwargs) -> None:
    kit.membership.register(member_id, registration(member_id, **kwargs), 7, kit.now, "", "", ANONYMOUS)
    kit.settle()


def test_a_member_admitted_is_answered_pinged_and_its_group_rebalanced():
    kit = Kit()
    membership = kit.build_membership()
    register(kit, "a")
    assert kit.sent["a"] == [(wire.RegisterConsumerResponse(coordinator_epoch=1), 7)]
    assert "a" in kit.groups.by_name["g"].members and ("rebalance", "g") in kit.timers and ("ping",) in kit.timers
    kit.advance(1.0, serve=("a",))
    assert kit.groups.by_name["g"].members["a"].running and not membership.registering


def test_a_bad_registration_is_refused_with_its_error_and_changes_nothing():
    kit = Kit()
    kit.build_membership()
    register(kit, "a/b")
    register(kit, "c", session_timeout_ms=CONFIG.max_session_timeout_ms + 1)
    assert kit.sent["a/b"][0][0].error_code == wire.ErrorCode.INVALID_REGISTRATION and "a/b" in kit.closed
    assert kit.sent["c"][0][0].error_code == wire.ErrorCode.INVALID_SESSION_TIMEOUT and "c" in kit.closed
    assert not kit.groups.get("g") or not kit.groups.by_name["g"].members


def test_a_dropped_member_leaves_what_it_ran_fenced_until_its_lease_has_surely_ended():
    kit = Kit()
    membership = kit.build_membership()
    register(kit, "a")
    kit.advance(1.0, serve=("a",))
    a = kit.groups.by_name["g"].members["a"]
    ran = a.running
    membership.connection_closed("a", kit.now)
    kit.settle()
    group = kit.groups.by_name["g"]
    assert "a" not in group.members and "a" in kit.closed
    assert group.fences.until(kit.now, ran) == lease_end(a.last_sent, T_MS, CONFIG.lease_margin_ms)


def test_a_static_member_away_keeps_its_place_until_its_session_timeout():
    kit = Kit()
    membership = kit.build_membership()
    register(kit, "s", is_static=True)
    kit.advance(1.0, serve=("s",))
    membership.connection_closed("s", kit.now)
    kit.advance(T - 0.1)
    assert "s" in kit.groups.by_name["g"].members and not kit.metrics.counts[EXPIRED_STATIC]
    kit.advance(0.2)
    assert "s" not in kit.groups.by_name["g"].members and kit.metrics.counts[EXPIRED_STATIC] == 1


def test_a_clean_leave_is_answered_once_its_final_offsets_are_written():
    kit = Kit()
    membership = kit.build_membership()
    register(kit, "a")
    kit.advance(1.0, serve=("a",))
    membership.received("a", wire.LeaveGroupRequest(offsets=wire.offset_entries({("t", 0): 33})), 9, kit.now)
    assert not [m for m, c in kit.sent["a"] if c == 9]  # not before the write
    kit.settle()
    assert kit.zk.offsets["g"][("t", 0)] == 33
    assert (wire.LeaveGroupResponse(error_code=wire.ErrorCode.NONE), 9) in kit.sent["a"] and "a" in kit.closed
