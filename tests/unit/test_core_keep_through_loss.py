"""A member that kept running its partitions through the loss of its coordinator.

It registers saying what it held (RegisterConsumerRequest version 6). The
coordinator lets it keep a partition only if that member alone may be
running it, as far as the coordinator knows; otherwise it refuses the
registration naming what may not be kept, and nobody else is started on those
before the member has stopped them or its lease has surely ended. Each test
is one interleaving, on the manual clock.
"""

from __future__ import annotations

from zkcoord import wire
from zkcoord.records import TopicPartition
from zkcoord.zk import layout

from tests.unit.core_harness import MARGIN, P, T, TAKEOVER, CoreHarness, FakeZooKeeper, proofs

STICKY = ("sticky",)
T0, T1, T2, T3 = P
# The predecessor's last generation, stable: owners recorded as assigned.
BEFORE = {"a": (T0, T1), "b": (T2, T3)}
GENERATION = 4
OLD_EPOCH = 1


def taken_over(assignment=BEFORE, running=None, generation=GENERATION, owners=None,
               read_owners: bool = True) -> CoreHarness:
    """A successor (epoch 2) that took over group g as its predecessor left it."""
    state = layout.GroupState(generation, "sticky", assignment, lease_ms=int(T * 1000), running=running or {},
                              proofs=proofs(*set(assignment) | set(running or {})))
    recorded = owners if owners is not None else {tp: m for m, tps in assignment.items() for tp in tps}
    h = CoreHarness(epoch=2, states={"g": state}, zk=FakeZooKeeper(owners={"g": recorded}))
    if read_owners:
        h.settle()  # the owners recorded, which the successor reads as it takes over
    return h


def claim(h: CoreHarness, conn, member_id: str, held, epoch: int = OLD_EPOCH, generation: int = GENERATION,
          **kwargs) -> wire.Message:
    """``member_id`` registers on ``conn`` saying it kept ``held``; the answer it got."""
    h.register(conn, member_id, assignment_strategies=STICKY, held=tuple(TopicPartition(*tp) for tp in held),
               held_epoch=epoch, held_generation=generation, **kwargs)
    return registration_answer(h, conn)


def registration_answer(h: CoreHarness, conn):
    answers = [m for m, _ in h.sent[conn] if isinstance(m, wire.RegisterConsumerResponse)]
    return answers[-1] if answers else None


def refused(answer) -> set:
    assert answer.error_code == wire.ErrorCode.HELD_PARTITIONS_REFUSED, answer
    return {(tp.topic, tp.partition) for tp in answer.refused}


def pushed(h: CoreHarness, conn, kind) -> list:
    return h.requests(conn, kind)


def test_a_claim_that_matches_keeps_its_partitions_with_no_stop_and_no_start():
    h = taken_over()
    for member_id, held in BEFORE.items():
        assert claim(h, member_id, member_id, held).error_code == wire.ErrorCode.NONE
        assert h.running(member_id) == set(held)  # counted on at once: its lease runs under this coordinator
    h.stable(list(BEFORE), seconds=TAKEOVER + 1.0)
    for member_id, held in BEFORE.items():
        assert h.running(member_id) == set(held)
        assert pushed(h, member_id, wire.StopRequest) == [] and pushed(h, member_id, wire.StartRequest) == []
    assert h.zk.owners["g"] == {tp: m for m, tps in BEFORE.items() for tp in tps}
    assert not h.core.groups["g"].fences  # nothing waits for anyone


def test_a_kept_partition_is_fenced_from_its_new_lease_if_the_member_goes_again():
    h = taken_over()
    claim(h, "a", "a", BEFORE["a"])
    claim(h, "b", "b", BEFORE["b"])
    h.stable(["a", "b"])
    last = h.core.groups["g"].members["a"].last_sent  # its registration, or the last request since
    h.apply(h.core.connection_closed("a", h.now))
    h.advance(T + MARGIN + 1.0, serve=("b",))
    assert h.first_start_elsewhere(BEFORE["a"], "a") >= last + T + MARGIN - 1e-9


def test_a_claim_of_a_partition_recorded_to_another_member_is_refused_and_stays_fenced():
    h = taken_over()
    answer = claim(h, "a", "a", BEFORE["a"] + (T2,))
    assert refused(answer) == {T2}
    assert "a" in h.closed and "a" not in h.core.groups["g"].members
    # It stops T2 and comes back without it, handing its offset over.
    h.register("a2", "a", assignment_strategies=STICKY, held=tuple(TopicPartition(*tp) for tp in BEFORE["a"]),
               held_epoch=OLD_EPOCH, held_generation=GENERATION, offsets=wire.offset_entries({T2: 7}))
    assert registration_answer(h, "a2").error_code == wire.ErrorCode.NONE
    assert h.zk.offsets["g"].get(T2) is None  # a did not run T2 last: its offset there is not taken
    h.advance(TAKEOVER - 0.1, serve=("a2",))
    assert h.first_start_elsewhere([T2, T3], "b") is None  # b's fence holds: b may still run them
    h.advance(1.0, serve=("a2",))
    assert h.running("a") == {T0, T1, T2, T3}


def test_a_claim_by_another_process_under_the_same_id_is_refused():
    # Member ids are no secret: only the incarnation fenced may keep anything.
    h = taken_over()
    answer = claim(h, "x", "a", BEFORE["a"], incarnation="someone else's")
    assert refused(answer) == set(BEFORE["a"])
    h.register("x2", "a", assignment_strategies=STICKY, incarnation="someone else's")
    h.advance(TAKEOVER - 0.1, serve=("x2",))
    assert h.first_start_elsewhere(P, "nobody") is None  # a's fences were not lifted by the stranger


def test_a_claim_from_a_member_whose_lease_ended_meanwhile_is_refused():
    h = CoreHarness()
    h.register("a", "a")
    h.stable(["a"])
    generation = h.core.groups["g"].generation
    last = h.last_request_at("a")
    h.apply(h.core.connection_closed("a", h.now))
    h.advance(last + T + MARGIN - h.now + 0.01)  # its fence, and with it any lease it held, is over
    answer = claim(h, "a2", "a", P, epoch=1, generation=generation)
    assert refused(answer) == set(P)


def test_a_claim_within_the_lease_after_a_dropped_connection_keeps_everything():
    # The coordinator lives; only the connection went. Nobody was started
    # since, and the member's fence still holds: it keeps what it ran.
    h = CoreHarness()
    h.register("a", "a", assignment_strategies=STICKY)
    h.register("b", "b", assignment_strategies=STICKY)
    h.stable(["a", "b"])
    held = sorted(h.running("a"))
    generation = h.core.groups["g"].generation
    h.apply(h.core.connection_closed("a", h.now))
    h.advance(0.5, serve=("b",))
    assert claim(h, "a2", "a", held, epoch=1, generation=generation).error_code == wire.ErrorCode.NONE
    h.advance(2.0, serve=("a2", "b"))
    assert sorted(h.running("a")) == held
    assert pushed(h, "a2", wire.StartRequest) == [] and pushed(h, "a2", wire.StopRequest) == []
    assert pushed(h, "b", wire.StopRequest) == []


def test_a_claim_arriving_after_the_successor_reassigned_is_refused():
    h = taken_over()
    h.register("b", "b", assignment_strategies=STICKY)  # back empty-handed
    h.advance(TAKEOVER + 1.0, serve=("b",))  # a never came: its partitions went to b
    assert h.running("b") == set(P)
    answer = claim(h, "a", "a", BEFORE["a"])
    assert refused(answer) == set(BEFORE["a"])
    assert h.running("b") == set(P) and pushed(h, "b", wire.StopRequest) == []


def test_a_claim_of_a_stale_generation_is_refused_where_a_later_one_moved_the_partition():
    # The predecessor died mid-round: generation 5 moves T1 from a to b; a
    # may not have obeyed the Stop yet, b may have been started on it: both
    # are fenced on T1 and nobody can tell which runs it.
    h = taken_over(assignment={"a": (T0,), "b": (T1, T2, T3)}, running={"a": (T0, T1), "b": (T2, T3)},
                   generation=5, owners={T0: "a", T1: "a", T2: "b", T3: "b"})
    assert refused(claim(h, "a", "a", (T0, T1), generation=4)) == {T1}
    assert h.first_start_elsewhere([T1], "a") is None
    # a stops T1, hands its offset over, and keeps T0.
    h.register("a2", "a", assignment_strategies=STICKY, held=(TopicPartition(*T0),), held_epoch=OLD_EPOCH,
               held_generation=4, offsets=wire.offset_entries({T1: 33}))
    assert registration_answer(h, "a2") is None  # not before its handover is written
    h.settle()
    assert registration_answer(h, "a2").error_code == wire.ErrorCode.NONE
    assert h.zk.offsets["g"][T1] == 33
    assert claim(h, "b", "b", (T2, T3), generation=4).error_code == wire.ErrorCode.NONE
    h.stable(["a2", "b"])
    assert T0 in h.running("a") and {T2, T3} <= h.running("b")
    starts_of_t1 = [p.offset for _t, _c, m in h.log if isinstance(m, wire.StartRequest)
                    for p in m.partitions if (p.topic, p.partition) == T1]
    assert starts_of_t1 == [33]  # started once, from what a handed over


def test_a_partition_the_last_round_moved_is_kept_by_its_new_holder_once_the_owners_say_the_round_ended():
    # Generation 5 swapped T1 and T2 between a and b and ended: the owners
    # were written. Its persisted state still names each as running what it
    # ran as the round began, so the successor fences T1 and T2 on both; the
    # owners recorded tell it that the old holders stopped them.
    h = taken_over(assignment={"a": (T0, T2), "b": (T1, T3)}, running={"a": (T0, T1), "b": (T2, T3)},
                   generation=5, owners={T0: "a", T1: "b", T2: "a", T3: "b"}, read_owners=False)
    early = claim(h, "b", "b", (T1, T3), generation=5)
    assert early.error_code == wire.ErrorCode.REBALANCE_IN_PROGRESS  # b keeps them and comes back in a moment
    h.settle()
    assert claim(h, "b2", "b", (T1, T3), generation=5).error_code == wire.ErrorCode.NONE
    # a, which stopped T1 in that round, can no longer claim it: b keeps it alone.
    assert refused(claim(h, "a", "a", (T0, T1, T2), generation=5)) == {T1}
    assert claim(h, "a2", "a", (T0, T2), generation=5).error_code == wire.ErrorCode.NONE
    h.stable(["a2", "b2"])
    assert h.running("a") == {T0, T2} and h.running("b") == {T1, T3}
    assert not [m for _t, _c, m in h.log if isinstance(m, (wire.StopRequest, wire.StartRequest))]


def test_a_claim_of_a_generation_never_reached_is_refused_whole():
    h = taken_over()
    assert refused(claim(h, "a", "a", BEFORE["a"], generation=GENERATION + 1)) == set(BEFORE["a"])


def test_a_claim_of_a_newer_epoch_says_this_coordinator_is_not_the_one():
    h = taken_over()
    answer = claim(h, "a", "a", BEFORE["a"], epoch=3)
    assert answer.error_code == wire.ErrorCode.NOT_COORDINATOR and answer.refused == ()


def test_a_claim_while_the_office_is_not_proven_is_not_answered_with_a_lease():
    h = taken_over()
    h.prove_office = False
    h.advance(5.0)  # no round trip for longer than the office lasts
    answer = claim(h, "a", "a", BEFORE["a"])
    assert answer.error_code == wire.ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert "a" not in h.core.groups["g"].members


def test_a_successor_deposed_mid_claim_admits_nobody():
    h = taken_over()
    # Its handover of a partition stopped earlier is written before it is
    # admitted; the successor is deposed while that write is out.
    h.register("a", "a", assignment_strategies=STICKY, held=(TopicPartition(*T0),), held_epoch=OLD_EPOCH,
               held_generation=GENERATION, offsets=wire.offset_entries({T1: 5}))
    assert h.operations and registration_answer(h, "a") is None
    h.apply(h.core.step_down(h.now))
    h.settle()
    assert registration_answer(h, "a") is None and "a" in h.closed
    assert not h.core.groups["g"].members


# -- offsets handed over beside a claim -------------------------------------------------------

def test_a_handover_offset_of_a_partition_still_held_is_not_taken_after_a_dropped_connection():
    """A final offset is final only for what the member stopped: one it hands
    over for a partition it keeps (from a Stop before a restart, e.g. a forced
    reset's) must not move the committed offset past what it has run since."""
    h = CoreHarness()
    h.register("a", "a", assignment_strategies=STICKY)
    h.stable(["a"])
    generation = h.core.groups["g"].generation
    h.advance(T / 3 + 0.1)  # a ping is out
    ping = next(c for m, c in h.unanswered("a") if isinstance(m, wire.PingRequest))
    h.answer("a", wire.PingResponse(offsets=wire.offset_entries({T0: 7}), last_poll_ms_ago=0), ping)
    h.advance(1.5, serve=("a",))
    assert h.zk.offsets["g"][T0] == 7
    h.apply(h.core.connection_closed("a", h.now))
    h.advance(0.5)
    h.register("a2", "a", assignment_strategies=STICKY, held=tuple(TopicPartition(*tp) for tp in P),
               held_epoch=1, held_generation=generation, offsets=wire.offset_entries({T0: 100}))
    h.settle()
    assert registration_answer(h, "a2").error_code == wire.ErrorCode.NONE
    assert h.running("a") == set(P)
    assert h.zk.offsets["g"][T0] == 7


def test_a_successor_takes_no_handover_offset_of_a_partition_it_lets_the_member_keep():
    h = taken_over()
    h.zk.offsets["g"][T0] = 7  # what the predecessor wrote last
    h.register("a", "a", assignment_strategies=STICKY, held=tuple(TopicPartition(*tp) for tp in BEFORE["a"]),
               held_epoch=OLD_EPOCH, held_generation=GENERATION, offsets=wire.offset_entries({T0: 100}))
    h.settle()
    assert registration_answer(h, "a").error_code == wire.ErrorCode.NONE
    assert T0 in h.running("a")
    assert h.zk.offsets["g"][T0] == 7
