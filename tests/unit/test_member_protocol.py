"""The member's protocol decisions, with a clock the test moves by hand.

Each test names the interleaving it pins down; the lease tests are the
consumer's half of docs/DESIGN.md's lease rule.
"""

from __future__ import annotations

import pytest

from zkcoord import wire
from zkcoord.coordinator.lease import lease_end
from zkcoord.member.protocol import (
    NO_OFFSET, Generation, IllegalMemberTransition, LeaseExpired, MemberProtocol, MemberState,
)

T = 10.0  # session timeout, seconds
A, B, C = ("t", 0), ("t", 1), ("t", 2)


class Listener:
    def __init__(self) -> None:
        self.running: dict = {}
        self.positions: dict = {}
        self.calls: list = []

    def on_start(self, partitions):
        self.calls.append(("start", dict(partitions)))
        self.running = dict(partitions)
        for tp, offset in partitions.items():
            self.positions.setdefault(tp, max(offset, 0))

    def on_stop(self, partitions):
        self.calls.append(("stop", frozenset(partitions)))
        for tp in partitions:
            self.running.pop(tp, None)
        return {tp: self.positions[tp] for tp in partitions if tp in self.positions}

    def offsets(self):
        return dict(self.positions)

    def last_poll_ms_ago(self):
        return 5


def registration(**overrides) -> wire.RegisterConsumerRequest:
    fields = dict(group_id="g", consumer_id="c-1", topics=("t",), session_timeout_ms=int(T * 1000))
    fields.update(overrides)
    return wire.RegisterConsumerRequest(**fields)


def registered_member(at: float = 0.0, epoch: int = 3) -> tuple[MemberProtocol, Listener]:
    listener = Listener()
    member = MemberProtocol(registration(), listener)
    member.register(at)
    member.registered(wire.RegisterConsumerResponse(coordinator_epoch=epoch))
    return member, listener


def ping(epoch: int = 3, generation: int = 1) -> wire.PingRequest:
    return wire.PingRequest(coordinator_epoch=epoch, generation=generation)


def start(*partitions, epoch: int = 3, generation: int = 1) -> wire.StartRequest:
    return wire.StartRequest(coordinator_epoch=epoch, generation=generation, strategy="range",
                             partitions=tuple(wire.TopicPartitionOffset(t, p, NO_OFFSET) for t, p in partitions))


def stop(*partitions, epoch: int = 3, generation: int = 1) -> wire.StopRequest:
    return wire.StopRequest(coordinator_epoch=epoch, generation=generation, revoke_all=False,
                            partitions=tuple(wire.TopicPartition(t, p) for t, p in partitions))


# -- the lease ----------------------------------------------------------------------------------


def test_the_lease_runs_from_the_registration_until_the_first_request():
    member, _ = registered_member(at=100.0)
    assert member.holds_lease(100.0 + T - 0.001)
    assert not member.holds_lease(100.0 + T)


def test_a_request_renews_the_lease_from_when_the_previous_answer_left_not_from_its_own_arrival():
    member, _ = registered_member(at=0.0)
    member.answer(ping(), now=3.0)  # proves the registration arrived: lease to 0 + T
    assert member.lease_deadline == T
    member.answer(ping(), now=6.0)  # proves the answer sent at 3 arrived
    assert member.lease_deadline == 3.0 + T
    assert member.holds_lease(3.0 + T - 0.001) and not member.holds_lease(3.0 + T)


def test_a_request_that_sat_in_the_socket_past_the_lease_does_not_renew_it():
    # Finding 4: the coordinator sent a ping at 5, the process was paused until 14.
    member, listener = registered_member(at=0.0)
    member.answer(start(A, B), now=1.0)
    with pytest.raises(LeaseExpired):
        member.answer(ping(), now=T + 1.0 + 0.5)
    assert member.state is MemberState.UNREGISTERED
    assert listener.running == {} and member.assignment == {}
    assert member.handover == {A: 0, B: 0}  # for the next registration


def test_a_paused_member_holds_no_lease_when_it_resumes_whatever_the_network_thread_did():
    member, _ = registered_member(at=0.0)
    member.answer(start(A), now=1.0)
    member.answer(ping(), now=4.0)  # lease to 1 + T
    assert member.holds_lease(1.0 + T - 0.01)
    # SIGSTOP from 5 to 30: no frame read yet, the application thread asks first.
    assert not member.holds_lease(30.0)


def test_a_pause_seen_voids_the_lease_until_a_request_proves_an_answer_sent_after_it():
    # Issue 31, item 5: the hypervisor held the machine 30 s; the lease clock
    # stood still, the wall clock was put right when it resumed.
    member, listener = registered_member(at=0.0)
    member.clocks_read(0.0, wall=5000.0)
    member.answer(start(A), now=1.0)
    member.answer(ping(), now=4.0)  # lease to 1 + T
    assert not member.clocks_read(5.0, wall=5005.0) and member.holds_lease(5.0)
    assert member.clocks_read(5.5, wall=5035.5)
    assert not member.holds_lease(5.5)  # though the lease clock says 1 + T is far
    assert listener.running == {A: NO_OFFSET}  # nothing stopped: the coordinator decides
    member.answer(ping(), now=6.0)  # proves only the answer sent at 4, before the pause
    assert not member.holds_lease(6.0)
    member.answer(ping(), now=8.0)  # proves the one sent at 6, after it
    assert member.holds_lease(8.0) and member.lease_deadline == 6.0 + T


def test_a_stop_may_wait_for_the_application_while_the_lease_has_half_a_session_left():
    member, _ = registered_member(at=0.0)
    member.answer(start(A), now=1.0)  # lease to T
    assert member.handoff_deadline(1.0) == T / 2
    assert member.handoff_deadline(T / 2 + 1.0) == T / 2 + 1.0  # no time left: at once
    member.lost()
    assert member.handoff_deadline(2.0) == 2.0  # no lease: at once


def test_check_lease_stops_everything_once_the_deadline_passes():
    member, listener = registered_member(at=0.0)
    member.answer(start(A), now=1.0)
    member.check_lease(T - 0.1)  # still held: nothing happens
    assert listener.running == {A: NO_OFFSET}
    with pytest.raises(LeaseExpired):
        member.check_lease(T)
    assert listener.running == {} and member.state is MemberState.UNREGISTERED


def test_the_lease_never_outlasts_the_coordinators_wait_in_any_delay_pattern():
    """The coordinator waits T + margin after its last send before it hands
    partitions on. Whatever the delays on the way (the request sent after the
    previous answer arrived, the request processed any time later), the
    member's lease has ended by then."""
    import random

    rng = random.Random(20261123)
    for _ in range(2000):
        member, _ = registered_member(at=0.0)
        answer_left = 0.0  # the registration
        coordinator_last_send = 0.0
        now = 0.0
        for _ in range(rng.randrange(1, 6)):
            arrived = answer_left + rng.uniform(0, 2)  # the answer reaches the coordinator
            coordinator_last_send = arrived + rng.uniform(0, 4)  # it pings later
            now = max(now, coordinator_last_send) + rng.expovariate(1.0)  # delivered and processed
            try:
                member.answer(ping(), now=now)
            except LeaseExpired:
                break
            answer_left = now
        assert member.lease_deadline <= lease_end(coordinator_last_send, int(T * 1000), margin_ms=0)


# -- authority ------------------------------------------------------------------------------------


def test_an_older_epoch_is_refused_and_a_newer_one_resets_the_generation():
    member, _ = registered_member(epoch=3)
    member.answer(start(A, generation=7), now=1.0)
    assert member.generation == Generation(3, 7)
    with pytest.raises(wire.StaleEpoch):
        member.answer(ping(epoch=2), now=2.0)
    member.answer(ping(epoch=4, generation=0), now=2.0)
    assert member.generation == Generation(4, -1)
    member.answer(start(A, epoch=4, generation=1), now=3.0)
    assert member.generation == Generation(4, 1)


def test_an_older_generation_of_the_same_epoch_is_refused():
    # A Stop or Start of a round the coordinator gave up on, arriving late.
    member, listener = registered_member()
    member.answer(start(A, B, generation=5), now=1.0)
    with pytest.raises(wire.StaleGeneration):
        member.answer(stop(A, generation=4), now=2.0)
    assert listener.running == {A: NO_OFFSET, B: NO_OFFSET}


def test_a_start_that_drops_a_partition_without_a_stop_is_refused_and_changes_nothing():
    member, listener = registered_member()
    member.answer(start(A, B), now=1.0)
    answer = member.answer(start(A, C, generation=2), now=2.0)
    assert answer.error_code == wire.ErrorCode.ILLEGAL_STATE
    assert set(member.assignment) == {A, B} and set(listener.running) == {A, B}


def test_requests_a_coordinator_does_not_send_are_refused():
    member, _ = registered_member()
    with pytest.raises(wire.IllegalState):
        member.answer(wire.LeaveGroupResponse(), now=1.0)


def test_an_error_from_the_coordinator_is_raised_as_its_type():
    member, _ = registered_member()
    with pytest.raises(wire.MaxPollIntervalExceeded):
        member.answer(wire.ErrorResponse(error_code=wire.ErrorCode.MAX_POLL_INTERVAL_EXCEEDED,
                                         message="idle"), now=1.0)


# -- answers ----------------------------------------------------------------------------------------


def test_a_ping_reports_offsets_of_owned_partitions_only():
    member, listener = registered_member()
    member.answer(start(A), now=1.0)
    listener.positions[C] = 99  # left over from before, not ours any more
    answer = member.answer(ping(), now=2.0)
    assert wire.offsets_of(answer.offsets) == {A: 0}
    assert answer.last_poll_ms_ago == 5


def test_a_stop_answers_with_the_final_offsets_and_keeps_them_for_a_next_coordinator():
    # Finding 8: a Stop's offsets are lost if the coordinator dies before it
    # writes them; the member hands them to the next coordinator.
    member, listener = registered_member()
    member.answer(start(A, B), now=1.0)
    listener.positions[A] = 41
    answer = member.answer(stop(A), now=2.0)
    assert wire.offsets_of(answer.offsets) == {A: 41}
    assert set(member.assignment) == {B}
    member.lost()
    again = member.register(5.0)
    assert wire.offsets_of(again.offsets) == {A: 41, B: 0}
    member.registered(wire.RegisterConsumerResponse(coordinator_epoch=4))
    assert member.handover == {}


# -- states -------------------------------------------------------------------------------------------


def test_a_refusal_retrying_cannot_fix_fails_the_member():
    member = MemberProtocol(registration(), Listener())
    member.register(0.0)
    with pytest.raises(wire.InvalidRegistration):
        member.registered(wire.RegisterConsumerResponse(error_code=wire.ErrorCode.INVALID_REGISTRATION,
                                                        error_message="bad"))
    assert member.state is MemberState.FAILED


def test_a_retriable_refusal_leaves_the_member_free_to_try_again():
    member = MemberProtocol(registration(), Listener())
    member.register(0.0)
    with pytest.raises(wire.NotCoordinator):
        member.registered(wire.RegisterConsumerResponse(error_code=wire.ErrorCode.NOT_COORDINATOR))
    assert member.state is MemberState.UNREGISTERED
    member.register(1.0)


def test_leaving_stops_everything_and_carries_the_final_offsets():
    member, listener = registered_member()
    member.answer(start(A, B), now=1.0)
    listener.positions.update({A: 7, B: 9})
    leave = member.leave()
    assert wire.offsets_of(leave.offsets) == {A: 7, B: 9}
    assert listener.running == {} and member.state is MemberState.LEAVING
    assert not member.holds_lease(1.5)


def test_an_evicted_member_rejoins_only_after_the_application_polls():
    member, _ = registered_member()
    member.lost(evicted=True)
    assert member.state is MemberState.EVICTED
    with pytest.raises(IllegalMemberTransition):
        member.register(1.0)
    member.polled_again()
    member.register(2.0)


def test_illegal_transitions_fail_loudly():
    member = MemberProtocol(registration(), Listener())
    with pytest.raises(IllegalMemberTransition):
        member.registered(wire.RegisterConsumerResponse(coordinator_epoch=1))
    with pytest.raises(IllegalMemberTransition):
        member.leave()


def test_a_member_that_lost_its_coordinator_waits_for_its_application_whatever_its_lease_has_left():
    # Found by the failover tests: losing its coordinator with less than
    # half a session of lease left, a member reported its offsets before the
    # batch in hand, and got that batch again from the new coordinator: a
    # failover with live members delivered one batch twice.
    member, listener = registered_member(at=0.0)
    member.answer(start(A), now=1.0)  # lease to T
    waited = []
    listener.on_stop = lambda partitions: waited.append(member.handoff_deadline(T - 0.1)) or {}
    member.lost()
    assert waited == [T - 0.1 + T / 2]
    assert member.handoff_deadline(T) == T  # and only while it stops what it ran


# -- keeping partitions through the loss of the coordinator ---------------------------------------


def lost_connection_at(now: float) -> tuple[MemberProtocol, Listener]:
    """A member running A and B (started in generation 1 of epoch 3, its lease to T) whose connection went at ``now``."""
    member, listener = registered_member(at=0.0)
    member.answer(start(A, B), now=1.0)
    assert member.keep(now)
    return member, listener


def test_a_member_that_lost_only_its_connection_keeps_running_under_the_lease_it_has():
    member, listener = lost_connection_at(5.0)
    assert set(listener.running) == {A, B} and ("stop", frozenset({A, B})) not in listener.calls
    assert member.state is MemberState.UNREGISTERED and member.keeping
    assert member.holds_lease(T - 0.001) and not member.holds_lease(T)
    request = member.register(6.0)
    assert member.holds_lease(6.5)  # registering: still under the old lease
    assert {(tp.topic, tp.partition) for tp in request.held} == {A, B}
    assert (request.held_epoch, request.held_generation) == (3, 1)


def test_a_kept_lease_runs_on_from_the_registration_the_next_coordinator_accepts():
    member, listener = lost_connection_at(5.0)
    member.register(6.0)
    member.registered(wire.RegisterConsumerResponse(coordinator_epoch=4), now=6.2)
    assert member.state is MemberState.ACTIVE and not member.keeping
    assert member.lease_deadline == 6.0 + T and set(listener.running) == {A, B}
    member.answer(ping(epoch=4), now=7.0)  # the new coordinator renews it as any
    assert member.holds_lease(6.0 + T - 0.001)


def test_a_member_whose_lease_ends_before_it_is_registered_stops_everything():
    member, listener = lost_connection_at(5.0)
    with pytest.raises(LeaseExpired):
        member.check_lease(T)
    assert listener.running == {} and not member.keeping and not member.holds_lease(T - 1.0)
    assert member.register(T + 1.0).held == ()  # back holding nothing, its offsets handed over
    assert member.handover == {A: 0, B: 0}


def test_an_acceptance_read_after_the_kept_lease_ended_stops_everything():
    # The coordinator counts on it running them, but an answer that late
    # renews nothing: it stops, and registers again holding nothing.
    member, listener = lost_connection_at(5.0)
    member.register(6.0)
    with pytest.raises(LeaseExpired):
        member.registered(wire.RegisterConsumerResponse(coordinator_epoch=4), now=T + 0.1)
    assert listener.running == {} and member.state is MemberState.UNREGISTERED


def test_a_member_stops_what_the_coordinator_refuses_and_keeps_the_rest():
    member, listener = lost_connection_at(5.0)
    member.register(6.0)
    with pytest.raises(wire.HeldPartitionsRefused):
        member.registered(wire.RegisterConsumerResponse(
            error_code=wire.ErrorCode.HELD_PARTITIONS_REFUSED, coordinator_epoch=4,
            refused=(wire.TopicPartition(*B),)), now=6.1)
    assert set(listener.running) == {A} and member.keeping and member.holds_lease(6.2)
    again = member.register(6.2)
    assert [(tp.topic, tp.partition) for tp in again.held] == [A]
    assert wire.offsets_of(again.offsets) == {B: 0}  # B's final offset, handed over


def test_a_retriable_refusal_keeps_what_the_member_holds():
    member, listener = lost_connection_at(5.0)
    member.register(6.0)
    with pytest.raises(wire.CoordinatorNotAvailable):
        member.registered(wire.RegisterConsumerResponse(error_code=wire.ErrorCode.COORDINATOR_NOT_AVAILABLE),
                          now=6.1)
    assert member.keeping and set(listener.running) == {A, B}


def test_a_member_keeps_nothing_once_a_pause_has_voided_its_lease():
    member, listener = registered_member(at=0.0)
    member.answer(start(A), now=1.0)
    member.clocks_read(2.0, wall=1000.0)
    member.clocks_read(2.1, wall=1005.0)  # the wall clock gained 5 s: the machine was paused
    assert not member.keep(2.2)
    assert listener.running == {} and not member.keeping


def test_a_pause_seen_while_keeping_stops_everything():
    member, listener = lost_connection_at(2.0)
    member.clocks_read(2.5, wall=1000.0)
    member.clocks_read(2.6, wall=1005.0)
    assert not member.holds_lease(2.7)
    with pytest.raises(LeaseExpired):
        member.check_lease(2.7)
    assert listener.running == {}


def test_a_member_whose_lease_already_ended_keeps_nothing():
    member, listener = registered_member(at=0.0)
    member.answer(start(A), now=1.0)
    assert not member.keep(T)
    assert listener.running == {} and member.state is MemberState.UNREGISTERED


def test_a_static_member_keeps_nothing():
    listener = Listener()
    member = MemberProtocol(registration(is_static=True), listener)
    member.register(0.0)
    member.registered(wire.RegisterConsumerResponse(coordinator_epoch=3))
    member.answer(start(A), now=1.0)
    assert not member.keep(2.0)
    assert listener.running == {}


def test_a_start_of_what_a_member_kept_is_a_no_op_for_it():
    member, listener = lost_connection_at(5.0)
    member.register(6.0)
    member.registered(wire.RegisterConsumerResponse(coordinator_epoch=4), now=6.1)
    member.answer(start(A, B, C, epoch=4, generation=5), now=7.0)
    assert set(listener.running) == {A, B, C}
    assert member.held_under == Generation(4, 5)


def test_a_partition_started_again_hands_over_no_final_offset_from_its_earlier_stop():
    """A forced reset's round stops a partition and starts it again on the
    same member: the Stop's final offset is not final any more, and a
    registration that keeps the partition must not hand it over."""
    listener = Listener()
    member = MemberProtocol(registration(), listener)
    member.register(0.0)
    member.registered(wire.RegisterConsumerResponse(coordinator_epoch=3))
    member.answer(start(A, B), now=0.5)
    listener.positions[A] = 100
    member.answer(stop(A, generation=2), now=1.0)
    member.answer(wire.StartRequest(coordinator_epoch=3, generation=2, strategy="range",
                                    partitions=(wire.TopicPartitionOffset(*A, 5), wire.TopicPartitionOffset(*B, NO_OFFSET))),
                  now=1.2)
    listener.positions[A] = 7
    assert member.keep(2.0)
    again = member.register(2.1)
    assert {(tp.topic, tp.partition) for tp in again.held} == {A, B}
    assert wire.offsets_of(again.offsets) == {}
