"""The coordinator's decisions, event by event, on a manual clock (core.py).

One test (or one parametrised case) per finding of the safety review, and
the interleavings around them. No sockets, no sleeps, no ZooKeeper: time
moves only when a test says so, and ZooKeeper answers only when it is told.
"""

import dataclasses

import pytest

from zkcoord.security.principal import user
from zkcoord import wire
from zkcoord.coordinator import actions
from zkcoord.coordinator.config import CoordinatorConfig
from zkcoord.coordinator.core import CoordinatorCore, CoordinatorState
from zkcoord.coordinator.group import GroupPhase, IllegalTransition
from zkcoord.zk import layout

from tests.unit.core_harness import CONFIG, MARGIN_MS, T_MS, TAKEOVER, ZK_SESSION_MS, CoreHarness, proofs

T = T_MS / 1000.0
MARGIN = MARGIN_MS / 1000.0
P = [("t", i) for i in range(4)]


def two_members() -> CoreHarness:
    """a runs t-0 and t-1, b runs t-2 and t-3 (range), everything written."""
    h = CoreHarness()
    h.register("a", "a")
    h.register("b", "b")
    h.stable(["a", "b"])
    assert h.running("a") == {P[0], P[1]} and h.running("b") == {P[2], P[3]}
    return h


def assert_fenced(h: CoreHarness, dropped_conn, partitions, lease_from: float, serve=("a",), horizon: float = 8.0):
    """Nobody else is started on ``partitions`` before the dropped member's
    lease (from its last request, ``lease_from``) plus the margin has passed;
    someone is, once it has."""
    h.advance(horizon, serve=serve)
    first = h.first_start_elsewhere(partitions, dropped_conn, after=0.0 if lease_from is None else lease_from)
    assert first is not None, "the partitions were never handed on"
    assert first >= lease_from + T + MARGIN - 1e-9, (first, lease_from)


def test_a_handoff_stops_and_writes_before_it_starts():
    h = CoreHarness()
    h.register("a", "a")
    h.stable(["a"])
    h.register("b", "b")
    h.advance(0.1)  # the debounce: the round sends its Stop
    (stop, _), = h.unanswered("a")
    assert isinstance(stop, wire.StopRequest) and {(p.topic, p.partition) for p in stop.partitions} == {P[2], P[3]}
    assert h.requests("b", wire.StartRequest) == []
    h.answer("a", wire.StopResponse(offsets=wire.offset_entries({P[2]: 7, P[3]: 8})))
    (write,) = h.operations.values()
    assert isinstance(write, actions.WriteOffsets) and dict(write.offsets) == {P[2]: 7, P[3]: 8}
    assert h.requests("b", wire.StartRequest) == []  # nothing starts before the stopped offsets are durable
    h.complete(actions.WriteOffsets)
    (start,) = h.requests("b", wire.StartRequest)
    assert {(p.topic, p.partition): p.offset for p in start.partitions} == {P[2]: 7, P[3]: 8}
    h.advance(0.5, serve=("a", "b"))
    assert h.zk.owners["g"] == {P[0]: "a", P[1]: "a", P[2]: "b", P[3]: "b"}
    assert h.core.groups["g"].phase is GroupPhase.STABLE


# -- finding 2 (and 3): every path that drops a member fences what it may run -------------------

def drop_by_silence(h):  # its pings go unanswered
    return None


def drop_by_reset_on_our_side(h):
    h.apply(h.core.connection_closed("b", h.now))


def drop_by_error(h):
    h.answer("b", wire.ErrorResponse(error_code=wire.ErrorCode.UNKNOWN, message="no"), correlation_id=0)


def drop_by_not_polling(h):
    h.advance(1.0)  # its next ping
    h.answer("b", wire.PingResponse(last_poll_ms_ago=10 ** 6))


def drop_by_static_timeout(h):
    h.apply(h.core.connection_closed("b", h.now))


@pytest.mark.parametrize("drop", [drop_by_silence, drop_by_reset_on_our_side, drop_by_error, drop_by_not_polling,
                                  drop_by_static_timeout])
def test_a_dropped_member_is_fenced_until_its_lease_has_ended(drop):
    h = CoreHarness()
    h.register("a", "a")
    h.register("b", "b", is_static=drop is drop_by_static_timeout)
    h.stable(["a", "b"])
    drop(h)
    lease_from = h.last_request_at("b")
    assert_fenced(h, "b", {P[2], P[3]}, lease_from)
    assert "b" not in h.core.groups["g"].members and "b" in h.closed
    assert h.running("a") == set(P)


def test_a_stop_left_unanswered_fences_the_member():
    h = two_members()
    h.register("c", "c")
    h.advance(0.1, serve=("a", "c"))  # b holds its Stop
    (stop, _), = h.unanswered("b")
    assert isinstance(stop, wire.StopRequest)
    lease_from = h.last_request_at("b")
    h.advance(CONFIG.rebalance_timeout_ms / 1000.0, serve=("a", "c"))
    assert "b" not in h.core.groups["g"].members
    assert_fenced(h, "b", {P[2], P[3]}, lease_from, serve=("a", "c"))


def test_a_start_left_unanswered_fences_what_it_gave():
    h = two_members()
    h.register("c", "c")
    h.advance(0.1, serve=("a", "b"))  # c holds its Start
    (start, _), = h.unanswered("c")
    given = {(p.topic, p.partition) for p in start.partitions}
    lease_from = h.last_request_at("c")
    h.advance(CONFIG.rebalance_timeout_ms / 1000.0, serve=("a", "b"))
    assert "c" not in h.core.groups["g"].members
    assert_fenced(h, "c", given, lease_from, serve=("a", "b"))


def test_the_lease_counts_from_the_last_request_sent_not_from_its_answer():
    h = two_members()
    h.advance(1.0)  # a ping goes out to each
    sent_at = h.last_request_at("b")
    h.advance(0.9)
    h.answer("b", wire.PingResponse(last_poll_ms_ago=0))  # a slow answer renews nothing on our side
    h.apply(h.core.connection_closed("b", h.now))
    assert h.core.groups["g"].fences.until(h.now) == pytest.approx(sent_at + T + MARGIN)


def test_a_member_dropped_during_a_round_keeps_its_fence():
    """Finding 3: the rebalance it asks for joins the round under way, which must not bypass the fence."""
    h = two_members()
    h.register("c", "c")
    h.advance(0.1)  # Stops out to a and b
    lease_from = h.last_request_at("b")
    h.apply(h.core.connection_closed("b", h.now))
    h.obey("a")
    assert_fenced(h, "b", {P[2], P[3]}, lease_from, serve=("a", "c"))


# -- finding 1: nothing of a round runs on into the next ----------------------------------------

def test_a_round_ends_only_when_every_request_it_sent_is_settled():
    config = CoordinatorConfig(**{**CONFIG.__dict__, "rebalance_protocol": "eager"})
    h = CoreHarness(config=config)
    for conn in "ab":
        h.register(conn, conn)
    h.stable(["a", "b"])
    h.advance(0.9)  # a's ping goes out and stays unanswered for now
    h.obey("b")
    h.register("c", "c")
    h.advance(0.1)  # the round: Stop to b now, a's Stop waits behind its ping
    assert [type(m) for m, _ in h.unanswered("a")] == [wire.PingRequest]
    h.obey("b")
    h.advance(0.5)
    h.answer("a", wire.PingResponse(last_poll_ms_ago=0))  # the Stop goes out only now
    assert isinstance(h.unanswered("a")[0][0], wire.StopRequest)
    assert h.core.groups["g"].members["a"].last_sent == h.now  # dated when it left
    a_sent = h.now
    # b was stopped long ago; a never answers. Nobody starts until a is dropped and its lease is over.
    h.advance(CONFIG.rebalance_timeout_ms / 1000.0 - 0.01, serve=("b", "c"))
    assert not h.requests("b", wire.StartRequest)[1:] and not h.requests("c", wire.StartRequest)
    assert_fenced(h, "a", {P[0], P[1]}, a_sent, serve=("b", "c"))
    late = h.sent["a"][-1]
    h.answer("a", wire.StopResponse(), correlation_id=late[1])  # from a closed connection: ignored
    assert set(h.core.groups["g"].members) == {"b", "c"}


def test_a_late_answer_after_the_timeout_changes_nothing():
    h = two_members()
    h.advance(1.0)
    (ping, correlation_id), = h.unanswered("b")
    h.advance(T + 0.01, serve=("a",))
    assert "b" not in h.core.groups["g"].members
    h.answer("b", wire.PingResponse(last_poll_ms_ago=0), correlation_id)
    assert "b" not in h.core.groups["g"].members


# -- finding 5: offsets are validated, and a bad one harms nothing -------------------------------

def test_bad_offsets_are_refused_and_the_group_keeps_writing():
    h = CoreHarness()
    h.zk.offsets["g"][P[1]] = 40
    h.register("a", "a")
    h.register("b", "b")
    h.stable(["a", "b"])
    h.advance(1.0)
    h.obey("b")
    h.answer("a", wire.PingResponse(last_poll_ms_ago=0, offsets=(
        wire.TopicPartitionOffset("t", 0, -1),  # negative
        wire.TopicPartitionOffset("t", 1, 30),  # below what is committed
        wire.TopicPartitionOffset("t", 2, 99),  # b's partition
    )))
    h.advance(1.5, serve=("b",))  # a flush passes; a's next ping waits for its answer
    assert dict(h.zk.offsets["g"]) == {P[1]: 40}  # nothing bad written, nothing wedged
    h.answer("a", wire.PingResponse(last_poll_ms_ago=0, offsets=(wire.TopicPartitionOffset("t", 0, 12),)),
             correlation_id=h.unanswered("a")[0][1])
    h.advance(1.0, serve=("a", "b"))
    assert h.zk.offsets["g"][P[0]] == 12
    assert h.core.groups["g"].phase is GroupPhase.STABLE


# -- finding 6: the coordinator's own state -------------------------------------------------------

def test_a_write_refused_for_a_newer_epoch_deposes_the_core_and_it_sends_nothing_more():
    h = CoreHarness()
    h.register("a", "a")
    h.advance(0.1, settle=False)
    h.complete(actions.ReadOwners, result={})
    h.complete(actions.WriteGroupState, error=actions.Deposed("epoch moved"))
    assert h.core.state is CoordinatorState.DEPOSED
    before = len(h.log)
    h.advance(10.0, serve=("a",))
    assert len(h.log) == before and not h.operations


def test_illegal_state_moves_fail_loudly():
    h = CoreHarness()
    h.apply(h.core.step_down(h.now))
    with pytest.raises(IllegalTransition):
        h.core.office.become(CoordinatorState.ACTIVE)


# -- finding 8: failover ------------------------------------------------------------------------

def persisted(**kwargs) -> dict:
    return {"g": layout.GroupState(5, "range", {"a": (P[0], P[1]), "b": (P[2], P[3])}, lease_ms=T_MS,
                                   running={"b": (P[2], P[3])}, proofs=proofs("a", "b"), **kwargs)}


def test_after_a_failover_everything_the_last_generation_ran_stays_fenced():
    h = CoreHarness(states=persisted())
    h.register("c", "c")
    assert_fenced(h, "a", set(P), 0.0, serve=("c",))
    assert h.core.groups["g"].generation > 5


def test_a_returning_member_hands_over_exact_offsets_before_it_is_answered():
    h = CoreHarness(states=persisted())
    h.register("a", "a", offsets=(wire.TopicPartitionOffset("t", 0, 50), wire.TopicPartitionOffset("t", 1, 60),
                                  wire.TopicPartitionOffset("t", 2, 70)))  # t-2 was b's: not a's to hand over
    assert h.sent["a"] == []  # no answer before the handover is durable
    h.complete(actions.ReadOffsets, result={})
    write = h.complete(actions.WriteOffsets)
    assert dict(write.offsets) == {P[0]: 50, P[1]: 60}
    (answer, _), = h.sent["a"]
    assert isinstance(answer, wire.RegisterConsumerResponse) and answer.error_code == 0
    fences = h.core.groups["g"].fences
    assert fences.last_ran_by("a") == frozenset() and "a" not in fences.holders()  # it stopped before it registered
    h.advance(8.0, serve=("a",))
    # b's partitions stay fenced for b's lease; then a resumes exactly where it stopped.
    starts = {(p.topic, p.partition): p.offset for m in h.requests("a", wire.StartRequest) for p in m.partitions}
    assert starts[P[0]] == 50 and starts[P[1]] == 60
    assert h.first_start_elsewhere({P[2], P[3]}, "b") >= T + MARGIN


def test_members_cut_off_past_their_lease_hand_over_exactly_if_nobody_ran_their_partitions_since():
    # The coordinator is cut off from every member for longer than their
    # leases: all are dropped, their fences lapse, and nobody is left to
    # start. Their offsets since the last flush are exact when they return.
    h = two_members()
    h.advance(T + 3.0)  # neither answers its ping: both dropped, then their fences lapse
    assert not h.core.groups["g"].members and h.core.groups["g"].fences.until(h.now) is None
    h.register("a2", "a", offsets=wire.offset_entries({P[0]: 30, P[1]: 31}))
    h.register("b2", "b", offsets=wire.offset_entries({P[2]: 42, P[3]: 43}))
    h.advance(1.0, serve=("a2", "b2"))
    assert h.zk.offsets["g"] == {P[0]: 30, P[1]: 31, P[2]: 42, P[3]: 43}
    starts = {(p.topic, p.partition): p.offset for conn in ("a2", "b2")
              for m in h.requests(conn, wire.StartRequest) for p in m.partitions}
    assert starts == {P[0]: 30, P[1]: 31, P[2]: 42, P[3]: 43}


def test_a_handover_for_partitions_someone_was_started_on_since_is_stale():
    h = two_members()
    h.advance(T + 3.0, serve=("a",))  # b is cut off: dropped, and once its fence lapses a runs everything
    assert h.running("a") == set(P)
    h.register("b2", "b", offsets=wire.offset_entries({P[2]: 99, P[3]: 99}))
    h.advance(2.0, serve=("a", "b2"))
    assert 99 not in h.zk.offsets["g"].values()


def test_a_start_sent_makes_earlier_handovers_stale_even_if_it_is_never_acknowledged():
    # The Start may have arrived: its member would deliver from the committed
    # offset, below a handover taken now.
    h = two_members()
    while "b" in h.core.groups["g"].members:  # b is cut off first
        h.advance(0.1, serve=("a",))
    while not h.started("a") & {P[2], P[3]}:  # a answers its pings, never the Start of b's partitions
        for message, correlation_id in h.unanswered("a"):
            if isinstance(message, wire.PingRequest):
                h.answer("a", wire.PingResponse(last_poll_ms_ago=0), correlation_id)
        h.advance(0.1)
    h.advance(T + 3.0)  # a is dropped for it; every fence lapses
    h.register("b2", "b", offsets=wire.offset_entries({P[2]: 12, P[3]: 13}))
    h.register("a2", "a", offsets=wire.offset_entries({P[0]: 30, P[1]: 31, P[2]: 15}))
    h.advance(1.0, serve=("a2", "b2"))
    assert h.zk.offsets["g"] == {P[0]: 30, P[1]: 31, P[2]: 15}


def round_about_to_start_what_b_ran() -> CoreHarness:
    """After a failover, b's fence has lapsed and the round under way will
    start all of b's partitions on a; it is reading the offsets its Starts carry."""
    h = CoreHarness(states=persisted())
    h.register("a2", "a")
    h.advance(TAKEOVER + 0.5, settle=False, serve=("a2",))
    while not any(isinstance(op, actions.ReadOffsets) for op in h.operations.values()):
        h.complete(result=h.zk.apply(h.operations[min(h.operations)]))  # ZooKeeper answers
    return h


def test_a_handover_of_partitions_the_round_under_way_will_start_waits_for_the_round():
    # Found by the 200-fault drill: a round's Starts carried the committed
    # offsets while a handover, taken meanwhile, was written above them.
    h = round_about_to_start_what_b_ran()
    h.register("b2", "b", offsets=wire.offset_entries({P[2]: 99, P[3]: 99}))
    (refusal, _), = h.sent["b2"]
    assert refusal.error_code == wire.ErrorCode.REBALANCE_IN_PROGRESS and "b2" in h.closed  # it keeps its handover
    h.advance(2.0, serve=("a2",))
    started = {(p.topic, p.partition): p.offset for m in h.requests("a2", wire.StartRequest) for p in m.partitions}
    assert started[P[2]] == -1 and 99 not in h.zk.offsets["g"].values()


def test_a_handover_refused_during_a_round_that_then_fails_is_taken_on_the_next_try():
    # From review: dropping those offsets (rather than refusing) lost them
    # when the round failed before starting anyone.
    h = round_about_to_start_what_b_ran()
    h.register("b2", "b", offsets=wire.offset_entries({P[2]: 99, P[3]: 99}))
    h.complete(actions.ReadOffsets, error=RuntimeError("connection loss"))  # the round fails: nothing started
    assert h.requests("a2", wire.StartRequest) == []
    h.register("b3", "b", offsets=wire.offset_entries({P[2]: 99, P[3]: 99}))
    h.advance(2.0, serve=("a2", "b3"))
    assert h.zk.offsets["g"][P[2]] == 99 and h.zk.offsets["g"][P[3]] == 99


def test_nothing_is_sent_started_or_written_while_suspended_and_answers_are_still_taken():
    h = two_members()
    h.register("c", "c")
    h.advance(0.1)  # Stops out
    h.apply(h.core.session_suspended(h.now))
    h.obey("a")
    h.obey("b")
    before = len(h.log)
    h.advance(2 * T, settle=False)
    assert len(h.log) == before and not h.operations  # no ping, no Start, no write
    assert h.core.pending_offsets["g"]  # the Stop answers were taken
    h.apply(h.core.session_resumed(h.now))
    h.advance(RENEWAL + 1.0, serve=("a", "b", "c"))  # the office lapsed meanwhile: two round trips
    assert h.running("c") and h.zk.offsets["g"]


# -- the office: requests go out only while the coordinator's session is proven alive ---------------

OFFICE = ZK_SESSION_MS * 2 / 3 / 1000.0  # how long a round trip proves the office for
RENEWAL = ZK_SESSION_MS / 4 / 1000.0  # between round trips; after a lapse, between the two that end it


def test_a_coordinator_paused_past_its_office_sends_nothing_when_it_wakes():
    # The gap the office closes: the coordinator sends a Stop and is paused
    # (SIGSTOP) past its ZooKeeper session; meanwhile a successor is elected.
    # The member, delayed too, answers the Stop only then. Waking, the old
    # coordinator reads that answer before kazoo reports the session lost:
    # a Start (or a ping) sent now would date a lease from an answer that
    # left after the election.
    h = two_members()
    h.register("c", "c")
    h.advance(0.1)
    assert isinstance(h.unanswered("b")[0][0], wire.StopRequest) and h.core.active
    h.now += ZK_SESSION_MS / 1000.0 + 1.0  # paused: no timer fires, no round trip runs
    before = len(h.log)
    h.prove_office = False  # the session is gone: no round trip will succeed
    h.obey("b")
    h.settle()
    assert h.log[before:] == [] and h.core.state is CoordinatorState.SUSPENDED
    proof = next(op for op in h.operations.values() if isinstance(op, actions.ProveOffice))
    h.complete(actions.ProveOffice, error=actions.Deposed("coordinator epoch 1 is no longer current"))
    assert proof and h.core.deposed
    h.advance(10.0, serve=("a", "b", "c"))
    assert h.log[before:] == []


def test_the_office_lapses_without_round_trips_and_comes_back_with_one():
    h = two_members()
    h.prove_office = False  # ZooKeeper stops answering while the connection still looks fine
    h.advance(OFFICE + 1.0, serve=("a", "b"))
    assert h.core.state is CoordinatorState.SUSPENDED
    lapsed_at = h.core.office_until
    assert h.last_request_at("a") < lapsed_at and h.last_request_at("b") < lapsed_at
    h.prove_office = True
    h.advance(2.0, serve=("a", "b"))
    assert h.core.active and h.last_request_at("a") > lapsed_at  # pings again


def test_a_long_running_coordinator_keeps_its_office():
    h = two_members()
    renewal = ZK_SESSION_MS / 4000.0
    for _ in range(600):  # a minute: renewed every S/4, the office never runs short, let alone lapses
        h.advance(0.1, serve=("a", "b"))
        assert h.core.active and h.core.office_until - h.now >= OFFICE - renewal - 0.1
    assert h.last_request_at("a") > 59.0


def test_a_suspension_longer_than_the_office_resumes_only_after_a_round_trip():
    h = two_members()
    h.apply(h.core.session_suspended(h.now))
    h.advance(OFFICE + 1.0, serve=("a", "b"))
    h.prove_office = False
    h.apply(h.core.session_resumed(h.now))  # the same session, but the office has lapsed
    assert h.core.state is CoordinatorState.SUSPENDED
    h.complete(actions.ProveOffice)
    assert h.core.state is CoordinatorState.SUSPENDED  # one round trip after a lapse is not enough
    h.advance(RENEWAL, serve=("a", "b"))
    h.complete(actions.ProveOffice)
    assert h.core.active


def test_after_a_lapse_a_round_trip_whose_session_then_expires_brings_nothing_back():
    # The gap DESIGN.md names: the coordinator's link went dark right after a
    # round trip; its next one, after the lapse, reaches the leader through a
    # follower just before the session expires, and succeeds. The session
    # expires a fraction of a tick later: a second round trip S/4 on fails.
    h = two_members()
    h.apply(h.core.session_suspended(h.now))  # the link went dark
    h.advance(OFFICE + 1.0, serve=("a", "b"))
    h.prove_office = False
    h.apply(h.core.session_resumed(h.now))
    assert h.core.state is CoordinatorState.SUSPENDED
    before = len(h.log)
    h.complete(actions.ProveOffice)  # the late one that got through
    h.advance(RENEWAL + 0.1, serve=("a", "b"))
    assert h.core.state is CoordinatorState.SUSPENDED and h.log[before:] == []
    h.complete(actions.ProveOffice, error=RuntimeError("session expired"))
    h.advance(2.0, serve=("a", "b"))
    assert h.log[before:] == []


def test_after_a_lapse_the_office_is_dated_from_the_first_of_the_two_round_trips():
    h = two_members()
    h.apply(h.core.session_suspended(h.now))
    h.advance(OFFICE + 1.0, serve=("a", "b"))
    h.prove_office = False
    first_began = h.now
    h.apply(h.core.session_resumed(h.now))
    h.complete(actions.ProveOffice)
    h.advance(RENEWAL + 0.01, serve=("a", "b"))
    assert h.core.state is CoordinatorState.SUSPENDED
    h.complete(actions.ProveOffice)
    assert h.core.active
    assert h.core.office_until == pytest.approx(first_began + OFFICE)


def test_a_first_round_trip_whose_office_ran_out_meanwhile_is_not_paired_with_a_later_one():
    # A first round trip after a lapse, then the link dark again (no second
    # one) until the office that first one would date has run out: that is a
    # lapse of its own. The next success is the first after *this* lapse;
    # paired with the old first, it dated an office already over, was spent
    # for nothing, and the office came back a round trip later than it should.
    h = two_members()
    h.apply(h.core.session_suspended(h.now))
    h.advance(OFFICE + 1.0, serve=("a", "b"))
    h.prove_office = False
    h.apply(h.core.session_resumed(h.now))
    h.complete(actions.ProveOffice)  # the first after the lapse
    h.apply(h.core.session_suspended(h.now))  # dark again before the second
    h.advance(OFFICE + 0.5, serve=("a", "b"))
    first_after_this_lapse = h.now
    h.apply(h.core.session_resumed(h.now))
    h.complete(actions.ProveOffice)
    assert h.core.state is CoordinatorState.SUSPENDED  # one round trip after a lapse is not enough
    h.advance(RENEWAL + 0.01, serve=("a", "b"))
    h.complete(actions.ProveOffice)  # the second, S/4 on: the office is back, dated from this lapse's first
    assert h.core.active
    assert h.core.office_until == pytest.approx(first_after_this_lapse + OFFICE)


def test_a_smaller_session_timeout_granted_on_reconnect_dates_the_office():
    # kazoo reconnects the same session through another server, which grants
    # it less: ZooKeeper expires it after the smaller timeout.
    h = two_members()
    proven = h.core.office_until - OFFICE
    h.apply(h.core.session_suspended(h.now))
    h.apply(h.core.session_resumed(h.now, granted_ms=ZK_SESSION_MS // 2))
    assert h.core.office_until == pytest.approx(proven + OFFICE / 2)
    h.advance(0.01, serve=("a", "b"))
    assert h.core.office_until - h.now <= OFFICE / 2 + 1e-9
    h.apply(h.core.session_resumed(h.now, granted_ms=ZK_SESSION_MS))  # a larger one changes nothing
    h.advance(0.01, serve=("a", "b"))
    assert h.core.office_until - h.now <= OFFICE / 2 + 1e-9


def test_a_failed_round_trip_is_tried_again_on_the_next_renewal():
    h = two_members()
    h.prove_office = False
    h.advance(ZK_SESSION_MS / 4000.0 + 0.01, serve=("a", "b"))
    h.complete(actions.ProveOffice, error=RuntimeError("connection loss"))
    h.advance(ZK_SESSION_MS / 4000.0, serve=("a", "b"))
    assert any(isinstance(op, actions.ProveOffice) for op in h.operations.values())


def test_a_renewal_due_during_a_slow_round_trip_starts_as_soon_as_that_one_ends():
    # Under load a round trip can take longer than the renewal interval.
    # Waiting for the next renewal after it would leave the office resting on
    # a proof begun long ago; the one that fell due meanwhile goes at once.
    h = two_members()
    renewal = ZK_SESSION_MS / 4000.0
    h.prove_office = False
    while not any(isinstance(op, actions.ProveOffice) for op in h.operations.values()):
        h.advance(0.01, serve=("a", "b"))
    slow_began = h.now
    h.advance(renewal * 1.5, serve=("a", "b"))  # a renewal fell due while the round trip was out
    assert [isinstance(op, actions.ProveOffice) for op in h.operations.values()].count(True) == 1
    h.complete(actions.ProveOffice)
    assert h.core.office_until == pytest.approx(slow_began + OFFICE, abs=0.02)
    follow_up = [op for op in h.operations.values() if isinstance(op, actions.ProveOffice)]
    assert len(follow_up) == 1  # started now, not at the next renewal
    began = h.now
    h.complete(actions.ProveOffice)
    assert h.core.office_until == pytest.approx(began + OFFICE)
    assert not any(isinstance(op, actions.ProveOffice) for op in h.operations.values())  # and no more


# -- interleavings ------------------------------------------------------------------------------------

def test_a_leave_crossing_a_stop_hands_on_without_a_fence():
    h = two_members()
    h.register("c", "c")
    h.advance(0.1, serve=("a",))  # b holds its Stop, then leaves with its final offsets
    h.answer("b", wire.LeaveGroupRequest(offsets=wire.offset_entries({P[2]: 21, P[3]: 31})), correlation_id=7)
    h.settle()
    assert isinstance(h.sent["b"][-1][0], wire.LeaveGroupResponse) and h.sent["b"][-1][1] == 7
    assert h.zk.offsets["g"][P[2]] == 21
    left_at = h.now
    h.advance(1.0, serve=("a", "c"))
    starts = {(p.topic, p.partition): p.offset for conn in "ac" for m in h.requests(conn, wire.StartRequest)
              for p in m.partitions}
    assert starts[P[2]] == 21 and starts[P[3]] == 31
    assert h.first_start_elsewhere({P[2], P[3]}, "b") < left_at + T  # it left cleanly: no lease to wait out


def test_a_change_during_a_round_runs_another_round_after_it():
    h = two_members()
    h.register("c", "c")
    h.advance(0.1)
    h.apply(h.core.partitions_changed("t", 6, h.now))
    h.advance(2.0, serve=("a", "b", "c"))
    assert set().union(*(h.running(m) for m in "abc")) == {("t", i) for i in range(6)}


def test_a_static_member_back_on_a_new_connection_waits_for_its_old_lease():
    h = CoreHarness()
    h.register("a", "a")
    h.register("s1", "s", is_static=True)
    h.stable(["a", "s1"])
    old_lease_from = h.last_request_at("s1")
    h.register("s2", "s", is_static=True)  # the old process may still be running
    assert "s1" in h.closed
    h.advance(8.0, serve=("a", "s2"))
    first = h.first_start_elsewhere({P[2], P[3]}, "s1")
    assert first >= old_lease_from + T + MARGIN
    assert h.running("s") == {P[2], P[3]}


def test_a_static_id_is_taken_over_only_by_the_principal_that_holds_it():
    h = CoreHarness()
    h.register("a", "a")
    h.register("s1", "s", is_static=True, principal=user("alice"))
    h.stable(["a", "s1"])
    refused = h.register("x", "s", is_static=True, principal=user("mallory"))
    answer = h.sent["x"][-1][0]
    assert isinstance(answer, wire.RegisterConsumerResponse)
    assert answer.error_code == wire.ErrorCode.STATIC_MEMBER_OWNED_BY_OTHER_PRINCIPAL
    assert "held by User:alice; User:mallory may not take it over" in answer.error_message
    assert "x" in h.closed and "s1" not in h.closed  # the holder is untouched
    assert refused.consumer_id == "s"
    h.register("anon", "s", is_static=True)  # nothing proved: ANONYMOUS, not alice
    assert h.sent["anon"][-1][0].error_code == wire.ErrorCode.STATIC_MEMBER_OWNED_BY_OTHER_PRINCIPAL
    h.register("s2", "s", is_static=True, principal=user("alice"))  # the holder itself comes back
    assert "s1" in h.closed
    assert h.sent["s2"][-1][0].error_code == wire.ErrorCode.NONE


def test_a_group_that_keeps_failing_is_marked_failed_and_recovers_on_the_next_change():
    h = CoreHarness()
    h.register("a", "a")
    for _ in range(CONFIG.max_rebalance_retries + 1):
        h.advance(5.0, settle=False, serve=("a",))
        while h.operations:
            op = next(iter(h.operations.values()))
            if isinstance(op, actions.WriteOwners):
                h.complete(actions.WriteOwners, error=RuntimeError("connection loss"))
            else:
                h.complete(result=h.zk.apply(op))
            h.obey("a")
    assert h.core.groups["g"].phase is GroupPhase.FAILED
    assert h.zk.failures["g"].attempts == CONFIG.max_rebalance_retries + 1
    h.register("b", "b")
    h.advance(2.0, serve=("a", "b"))
    assert h.core.groups["g"].phase is GroupPhase.STABLE and h.zk.failures["g"] is None


# -- found in review of the core --------------------------------------------------------------------

def test_a_suspension_while_the_state_is_written_sends_no_stop():
    h = two_members()
    h.register("c", "c")
    h.advance(0.1, settle=False)
    assert any(isinstance(op, actions.WriteGroupState) for op in h.operations.values())
    h.apply(h.core.session_suspended(h.now))
    before = len(h.log)
    h.settle()
    assert len(h.log) == before  # no Stop: it would renew leases for a round that cannot finish
    h.apply(h.core.session_resumed(h.now))
    h.advance(1.0, serve=("a", "b", "c"))
    assert h.running("c")


def test_nobody_is_admitted_and_no_round_runs_before_the_predecessors_state_is_loaded():
    core = CoordinatorCore(CONFIG, 1, ZK_SESSION_MS)
    assert core.state is CoordinatorState.LOADING
    request = wire.RegisterConsumerRequest(group_id="g", consumer_id="c", topics=("t",), session_timeout_ms=T_MS)
    refusal, close = core.register("c", request, 5, 0.0)
    assert refusal.message.error_code == wire.ErrorCode.COORDINATOR_NOT_AVAILABLE and close == actions.Close("c")
    core.session_suspended(0.0)  # reported while loading: it starts suspended
    core.load({}, 0.0, 0.1)
    core.start(0.1)
    assert core.state is CoordinatorState.SUSPENDED


def test_a_member_that_leaves_during_a_round_is_started_on_nothing():
    h = CoreHarness()
    h.register("a", "a")
    h.stable(["a"])
    h.register("b", "b")
    h.advance(0.1)
    h.answer("a", wire.StopResponse(offsets=wire.offset_entries({P[2]: 5, P[3]: 6})))
    (stop_write,) = h.operations  # the round writes the stopped offsets...
    h.answer("b", wire.LeaveGroupRequest(), correlation_id=3)  # ...when b leaves
    h.complete(actions.WriteOffsets)
    h.settle()
    assert h.requests("b", wire.StartRequest) == []
    left_at = h.now
    h.advance(1.0, serve=("a",))
    assert h.running("a") == set(P)
    assert h.first_start_elsewhere({P[2], P[3]}, "b", after=left_at) < left_at + T  # no fence to wait out


def test_a_static_member_back_hands_over_what_its_old_connection_ran():
    h = CoreHarness()
    h.register("a", "a")
    h.register("s1", "s", is_static=True)
    h.stable(["a", "s1"])
    h.register("s2", "s", is_static=True, offsets=wire.offset_entries({P[2]: 77, P[3]: 88}))
    h.settle()
    assert h.zk.offsets["g"][P[2]] == 77 and h.zk.offsets["g"][P[3]] == 88


def test_a_flush_asked_for_during_a_write_writes_what_arrived_meanwhile():
    config = CoordinatorConfig(**{**CONFIG.__dict__, "offset_flush_interval_ms": 60_000})
    h = CoreHarness(config=config)
    h.register("a", "a")
    h.stable(["a"])
    for offset in (5, 6):
        h.advance(1.0, settle=False)
        h.answer("a", wire.PingResponse(last_poll_ms_ago=0, offsets=wire.offset_entries({P[0]: offset})))
        h.apply(h.core.flush_all(h.now))  # the second while the first write is still out
    h.settle()
    assert h.zk.offsets["g"][P[0]] == 6 and not h.core.flushing


def test_a_read_that_ends_late_never_lowers_a_committed_offset_we_wrote():
    h = CoreHarness()
    h.core.committed["g"] = {P[0]: 50}
    h.core.offsets.learn("g", {P[0]}, {P[0]: 40})
    assert h.core.committed["g"][P[0]] == 50


def test_pings_due_within_a_tick_go_together_and_every_deadline_shares_one_timer():
    from zkcoord.coordinator.core import ANSWERS_TIMER, PING_TICK_S, PING_TIMER

    h = CoreHarness()
    members = [f"m{i}" for i in range(40)]
    for i, name in enumerate(members):  # joins spread over a second: pings fall due apart
        h.register(name, name, group=f"g{i % 4}")
        h.advance(0.025, serve=members)
    timers_set = []
    apply = h.apply
    h.apply = lambda todo: timers_set.extend(a.key for a in todo if isinstance(a, actions.SetTimer)) or apply(todo)
    pings_before = sum(isinstance(m, wire.PingRequest) for name in members for m, _ in h.sent[name])
    h.advance(5 * T, serve=members)
    pings = sum(isinstance(m, wire.PingRequest) for name in members for m, _ in h.sent[name]) - pings_before
    assert pings >= len(members) * 12  # every member pinged every T/3
    assert all(name in h.core.groups[f"g{i % 4}"].members for i, name in enumerate(members))
    # A timer per tick at most for the pings, and one for every deadline.
    for key in (PING_TIMER, ANSWERS_TIMER):
        assert timers_set.count(key) <= 5 * T / PING_TICK_S + 1
        assert timers_set.count(key) < pings / 2
    assert not any(isinstance(key, tuple) and key[0] == "answer" for key in timers_set)


# -- a new group forming (the initial rebalance delay) -----------------------------------------

FORMING = dataclasses.replace(CONFIG, initial_rebalance_delay_ms=1000)  # rebalance timeout 2 s


def test_a_new_group_waits_for_the_crowd_and_makes_one_round():
    h = CoreHarness(FORMING)
    for i, conn in enumerate(("a", "b", "c")):  # a join every 0.4 s: each one postpones the round
        h.register(conn, conn)
        h.advance(0.4, serve=("a", "b", "c"))
        assert all(h.requests(c, wire.StartRequest) == [] for c in "abc")
    h.advance(0.5, serve=("a", "b", "c"))  # 0.9 s after the last join: still waiting
    assert all(h.requests(c, wire.StartRequest) == [] for c in "abc")
    h.advance(0.2, serve=("a", "b", "c"))  # 1 s after it: one round, every member in it
    assert [len(h.requests(c, wire.StartRequest)) for c in "abc"] == [1, 1, 1]
    assert h.started("a") | h.started("b") | h.started("c") == set(P[:4])
    assert h.core.groups["g"].generation == 1


def test_a_crowd_that_keeps_coming_waits_no_longer_than_the_rebalance_timeout():
    h = CoreHarness(FORMING)
    h.register("m0", "m0")
    first_start = None
    for i in range(1, 12):  # a join every 0.3 s, for 3.3 s
        h.advance(0.3, serve=tuple(f"m{j}" for j in range(i)))
        if first_start is None and h.requests("m0", wire.StartRequest):
            first_start = h.now
        h.register(f"m{i}", f"m{i}")
    assert first_start is not None and 2.0 <= first_start <= 2.1 + 1e-9  # the rebalance timeout after the first


def test_joins_faster_than_the_debounce_past_the_timeout_do_not_postpone_the_first_round():
    # A join every 50 ms, for 4 s: past the cap, each join must not move the
    # round to its own debounce (it did, and no round ran while they came).
    h = CoreHarness(FORMING)
    h.register("m0", "m0")
    first_start = None
    for i in range(1, 80):
        h.advance(0.05, serve=tuple(f"m{j}" for j in range(i)))
        if first_start is None and h.requests("m0", wire.StartRequest):
            first_start = h.now
        h.register(f"m{i}", f"m{i}")
    assert first_start is not None and 2.0 <= first_start <= 2.1 + 1e-9


def test_a_group_with_a_generation_gets_the_plain_debounce():
    # A group a predecessor coordinated (or that has had its first round) is
    # not forming: a join is answered after the 100 ms debounce.
    state = layout.GroupState(3, "range", {"a": ((P[0][0], P[0][1]),)}, lease_ms=0, proofs=proofs("a"))
    h = CoreHarness(FORMING, states={"g": state})
    h.register("a", "a")
    h.advance(0.15, serve=("a",))
    assert h.requests("a", wire.StartRequest)


# -- a paused machine: the lease clock stood still, the session may have ended ----------------------

def test_a_machine_seen_paused_ends_the_office_until_round_trips_begun_after_it_prove_it():
    # A virtual machine held by its hypervisor: CLOCK_BOOTTIME stood still
    # with it, so the office (dated on it) looks alive, but ZooKeeper may
    # have expired the session and elected a successor meanwhile.
    h = two_members()
    h.prove_office = False
    while not any(isinstance(op, actions.ProveOffice) for op in h.operations.values()):
        h.advance(0.01, serve=("a", "b"))  # a round trip goes out before the pause ...
    before = len(h.log)
    h.apply(h.core.machine_paused(30.0, h.now))  # ... and the runtime sees the wall clock 30 s ahead
    assert h.core.state is CoordinatorState.SUSPENDED
    h.complete(actions.ProveOffice)  # answered, but begun before the pause was seen: proves nothing
    h.advance(0.5, serve=("a", "b"))
    assert h.core.state is CoordinatorState.SUSPENDED and h.log[before:] == []
    h.prove_office = True  # the session did survive: two round trips begun after it bring the office back
    h.advance(RENEWAL + 1.0, serve=("a", "b"))
    assert h.core.active and h.last_request_at("a") > h.now - RENEWAL - 1.0


def test_a_registration_is_checked_against_each_list_of_strategies_once(monkeypatch):
    from zkcoord.coordinator.core import membership as core_module

    h = CoreHarness()
    for n in range(300):
        h.register(f"c{n}", f"m{n}", assignment_strategies=("range",))
    h.register("s", "sticky-one", assignment_strategies=("sticky", "range"))
    checked = []
    choose = core_module.choose_strategy
    monkeypatch.setattr(core_module, "choose_strategy", lambda lists: checked.append(len(lists)) or choose(lists))
    h.register("x", "roundrobin-only", assignment_strategies=("roundrobin",))
    (refusal, _), = h.sent["x"]
    assert refusal.error_code == wire.ErrorCode.NO_COMMON_STRATEGY and "x" in h.closed
    # Not 302 lists for a group of 301: one per list its members offer.
    assert checked == [3]
    h.register("y", "sticky-two", assignment_strategies=("sticky", "range"))
    assert h.sent["y"][0][0] == wire.RegisterConsumerResponse(coordinator_epoch=1)


def test_a_pause_seen_while_loading_leaves_the_office_to_round_trips_begun_after_it():
    # From review: load() dated the office from a round trip begun before a
    # pause the runtime had seen meanwhile.
    from zkcoord.coordinator.core import CoordinatorCore

    core = CoordinatorCore(CONFIG, 1, ZK_SESSION_MS)
    core.machine_paused(30.0, 1.0)
    core.load({}, proven_at=0.5, now=1.0)
    core.start(1.0)
    assert core.state is CoordinatorState.SUSPENDED
