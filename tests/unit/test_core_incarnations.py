"""A member id is no secret; only the process that registered it proves it is back.

Members' ids are listed by `groups describe` and DescribeGroups, and KIP-848
clients choose their own. A registration under a held or fenced id lifts the
fences, takes over the connection and hands over offsets only with the
incarnation secret the id was registered with (RegisterConsumerRequest v4).
"""

from __future__ import annotations

from zkcoord import wire
from zkcoord.coordinator import actions
from zkcoord.security.principal import Principal
from zkcoord.zk import layout

from tests.unit.core_harness import MARGIN, P, T, T_MS, CoreHarness, proofs


def user(name: str) -> Principal:
    return Principal("User", name)


def two_members() -> CoreHarness:
    """a runs t-0 and t-1, b runs t-2 and t-3 (range), everything written."""
    h = CoreHarness()
    h.register("a", "a")
    h.register("b", "b")
    h.stable(["a", "b"])
    assert h.running("b") == {P[2], P[3]}
    return h


def drop_b_on_our_side(h: CoreHarness) -> float:
    """b's connection closes on the coordinator's side only: b may run on
    under its lease. Returns when b's lease began (its last request)."""
    lease_from = h.last_request_at("b")
    h.apply(h.core.connection_closed("b", h.now))
    assert "b" not in h.core.groups["g"].members
    return lease_from


def starts_of(h: CoreHarness, conn) -> dict:
    return {(p.topic, p.partition): p.offset for m in h.requests(conn, wire.StartRequest) for p in m.partitions}


def test_anyone_else_registering_under_a_dropped_id_waits_for_its_fence():
    h = two_members()
    lease_from = drop_b_on_our_side(h)
    h.register("x", "b", incarnation="a guess")  # the id is known; the secret is not
    assert h.sent["x"][-1][0].error_code == wire.ErrorCode.NONE  # admitted: the id is free
    h.advance(8.0, serve=("a", "x"))
    first = h.first_start_elsewhere({P[2], P[3]}, "b")
    assert first is not None and first >= lease_from + T + MARGIN - 1e-9


def test_a_registration_without_an_incarnation_proves_nothing():
    h = two_members()
    lease_from = drop_b_on_our_side(h)
    h.register("x", "b", incarnation="")  # as versions 0 to 3 of the registration
    h.advance(8.0, serve=("a", "x"))
    assert h.first_start_elsewhere({P[2], P[3]}, "b") >= lease_from + T + MARGIN - 1e-9


def test_the_same_incarnation_back_lifts_its_fence_at_once():
    h = two_members()
    drop_b_on_our_side(h)
    back_at = h.now
    h.register("b2", "b")
    h.advance(1.0, serve=("a", "b2"))
    assert h.running("b") == {P[2], P[3]}
    assert h.first_start_elsewhere({P[2], P[3]}, "b") < back_at + 1.0  # no wait for the lease


def test_a_stranger_under_a_dropped_id_hands_over_nothing():
    h = two_members()
    drop_b_on_our_side(h)
    h.register("x", "b", incarnation="a guess", offsets=wire.offset_entries({P[2]: 999, P[3]: 999}))
    h.advance(8.0, serve=("a", "x"))
    assert 999 not in h.zk.offsets["g"].values()


def test_a_member_back_while_its_old_connection_is_still_open_on_our_side_takes_its_place_at_once():
    # Its packets to the coordinator were lost: it stopped at the end of its
    # lease and registers on a new connection, while the coordinator still
    # waits on the old one. It hands over exactly what it consumed.
    h = two_members()
    h.advance(T + 0.01, serve=("a",))  # b's answers never arrive; its lease has ended, the coordinator not yet
    assert "b" in h.core.groups["g"].members and "b" not in h.closed
    h.register("b2", "b", offsets=wire.offset_entries({P[2]: 70, P[3]: 80}))
    h.settle()
    assert "b" in h.closed
    assert h.sent["b2"][-1][0].error_code == wire.ErrorCode.NONE
    back_at = h.now
    h.advance(1.0, serve=("a", "b2"))
    assert starts_of(h, "b2") == {P[2]: 70, P[3]: 80}  # from its handover: nothing delivered twice
    assert min(t for t, c, m in h.log if c == "b2" and isinstance(m, wire.StartRequest)) < back_at + 1.0
    assert h.requests("a", wire.StartRequest)[-1].partitions == tuple(
        wire.TopicPartitionOffset(t, p, o) for (t, p), o in sorted(starts_of(h, "a").items())
        if (t, p) in {P[0], P[1]})


def test_a_stranger_under_a_registered_id_is_refused_and_the_holder_untouched():
    h = two_members()
    h.register("x", "b", incarnation="a guess")
    answer = h.sent["x"][-1][0]
    assert answer.error_code == wire.ErrorCode.CONSUMER_ID_IN_USE
    assert "x" in h.closed and "b" not in h.closed


def test_the_same_incarnation_under_another_principal_is_refused():
    h = CoreHarness()
    h.register("a", "a", principal=user("alice"))
    h.stable(["a"])
    h.register("x", "a", principal=user("mallory"))  # even with the secret (stolen, say)
    assert h.sent["x"][-1][0].error_code == wire.ErrorCode.CONSUMER_ID_IN_USE
    assert "a" not in h.closed


def test_a_static_member_and_a_dynamic_one_never_take_each_others_id():
    h = CoreHarness()
    h.register("s1", "s", is_static=True)
    h.stable(["s1"])
    h.register("d", "s")  # the static member's own secret, but as a dynamic registration
    assert h.sent["d"][-1][0].error_code == wire.ErrorCode.CONSUMER_ID_IN_USE


def test_after_a_failover_only_the_persisted_incarnation_lifts_its_fence():
    state = layout.GroupState(5, "range", {"a": (P[0], P[1]), "b": (P[2], P[3])}, lease_ms=T_MS,
                              proofs=proofs("a", "b"))
    h = CoreHarness(states={"g": state})
    h.register("a", "a", offsets=wire.offset_entries({P[0]: 50, P[1]: 60}))
    h.register("x", "b", incarnation="a guess", offsets=wire.offset_entries({P[2]: 999, P[3]: 999}))
    h.settle()
    fences = h.core.groups["g"].fences
    assert "a" not in fences.holders() and "b" in fences.holders()
    h.advance(8.0, serve=("a", "x"))
    assert h.zk.offsets["g"] == {P[0]: 50, P[1]: 60}
    assert starts_of(h, "a")[P[0]] == 50
    assert h.first_start_elsewhere({P[2], P[3]}, "b") >= T + MARGIN - 1e-9


def test_the_state_persists_the_proof_never_the_secret():
    h = two_members()
    state = h.zk.states["g"]
    assert state.proofs == proofs("a", "b")
    assert "b's incarnation" not in layout.encode_group_state(state).decode()


def test_a_proof_is_forgotten_once_nothing_it_could_lift_is_left():
    h = two_members()
    drop_b_on_our_side(h)
    h.advance(T + MARGIN + 2.0, serve=("a",))  # b's fence lapses and a is started on b's partitions
    assert h.running("a") == set(P)
    fences = h.core.groups["g"].fences
    fences.until(h.now)
    assert not fences.proves("b", proofs("b")["b"])
    h.register("b2", "b", offsets=wire.offset_entries({P[2]: 999}))  # stale anyway: a ran them since
    h.advance(1.0, serve=("a", "b2"))
    assert 999 not in h.zk.offsets["g"].values()
    assert not any(isinstance(op, actions.WriteOffsets) and P[2] in op.offsets and op.offsets[P[2]] == 999
                   for op in h.zk.writes)


def test_a_static_registration_under_a_dropped_dynamic_id_hands_over_nothing():
    # From review: a static registration was taken for proof enough, so a
    # stranger naming itself static under b's id set b's offsets at will.
    h = two_members()
    drop_b_on_our_side(h)
    h.register("x", "b", is_static=True, incarnation="", offsets=wire.offset_entries({P[2]: 999, P[3]: 999}))
    h.advance(8.0, serve=("a", "x"))
    assert 999 not in h.zk.offsets["g"].values()


def test_a_secret_replayed_by_another_principal_lifts_nothing():
    # The secret crosses the link: captured where there is no TLS, it must
    # not lift the fences of the principal that drew it.
    h = CoreHarness()
    h.register("a", "a", principal=user("alice"))
    h.register("b", "b", principal=user("bob"))
    h.stable(["a", "b"])
    lease_from = drop_b_on_our_side(h)
    h.register("x", "b", principal=user("mallory"), offsets=wire.offset_entries({P[2]: 999}))  # b's secret
    h.advance(8.0, serve=("a", "x"))
    assert 999 not in h.zk.offsets["g"].values()
    assert h.first_start_elsewhere({P[2], P[3]}, "b") >= lease_from + T + MARGIN - 1e-9


def test_two_incarnations_fenced_under_one_id_leave_neither_a_proof():
    from zkcoord.coordinator.lease import Fences

    fences = Fences()
    fences.fence("b", [P[2]], 10.0, "first process")
    fences.fence("b", [P[3]], 12.0, "second process")  # a stranger admitted under b, dropped in turn
    assert not fences.proves("b", "first process") and not fences.proves("b", "second process")
    fences.fence("c", [P[0]], 10.0, "same")
    fences.fence("c", [P[1]], 11.0, "same")  # one process fenced twice keeps its proof
    assert fences.proves("c", "same")
