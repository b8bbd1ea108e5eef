"""KIP-848's ConsumerGroupHeartbeat decisions for a bridged stock client
(broker/groups/kip848.py), interleaving by interleaving, on a manual clock.

The rule under test: a partition the coordinator stops is released (its Stop
answered) only once the client reports that it no longer owns it, and a
partition sent to the client counts as held whatever it reports before."""

from __future__ import annotations

import pytest

from zkcoord.broker.groups import kip848
from zkcoord.broker.groups.kip848 import ConsumerMember
from zkcoord.broker.groups.member import NONE, UNKNOWN_MEMBER_ID
from zkcoord.records import TopicPartition

A, B, C = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("t", 2)


def joined_member(assignment=(A, B)) -> ConsumerMember:
    """A member that joined and was sent ``assignment``, which it now owns."""
    member = ConsumerMember("m-1", ("t",), session_timeout_ms=6000, rebalance_timeout_ms=20000)
    assert member.heartbeat(kip848.JOIN_EPOCH, None, 0.0) == (NONE, frozenset())  # nothing assigned yet
    member.start({tp: 0 for tp in assignment}, 0.1)
    assert member.heartbeat(member.generation, frozenset(), 0.2) == (NONE, frozenset(assignment))
    assert member.heartbeat(member.generation, frozenset(assignment), 0.3) == (NONE, None)
    return member


def test_a_joining_member_gets_its_assignment_with_a_new_epoch():
    member = ConsumerMember("m-1", ("t",), session_timeout_ms=6000, rebalance_timeout_ms=20000)
    member.start({A: 0}, 0.0)
    assert member.heartbeat(kip848.JOIN_EPOCH, None, 0.1) == (NONE, frozenset({A}))
    assert member.generation == 1


def test_a_stopped_partition_leaves_the_target_and_is_released_once_no_longer_owned():
    member = joined_member()
    epoch = member.generation
    assert member.stop(frozenset({B}), 1.0) == frozenset()
    error, sent = member.heartbeat(epoch, frozenset({A, B}), 1.1)
    assert (error, sent) == (NONE, frozenset({A})) and member.generation == epoch + 1
    assert member.revoking == {B}  # still owned
    member.heartbeat(member.generation, frozenset({A, B}), 1.2)
    assert member.revoking == {B}
    member.heartbeat(member.generation, frozenset({A}), 1.3)
    assert member.revoking == frozenset()


def test_a_partition_sent_but_not_yet_taken_counts_as_held():
    member = joined_member(assignment=(A,))
    member.start({A: 0, B: 0}, 1.0)
    assert member.heartbeat(member.generation, frozenset({A}), 1.1) == (NONE, frozenset({A, B}))
    # It reports before it has taken B; then B is taken away again.
    member.heartbeat(member.generation, frozenset({A}), 1.2)
    assert member.stop(frozenset({B}), 1.3) == frozenset()
    member.heartbeat(member.generation, frozenset({A, B}), 1.4)
    assert member.revoking == {B}
    member.heartbeat(member.generation, frozenset({A}), 1.5)
    assert member.revoking == frozenset()


def test_a_client_cannot_claim_partitions_it_was_never_sent():
    member = joined_member(assignment=(A,))
    member.heartbeat(member.generation, frozenset({A, C}), 1.0)
    assert C not in member.holding


def test_the_previous_epoch_is_accepted_once_and_the_assignment_sent_again():
    member = joined_member()
    member.stop(frozenset({B}), 1.0)
    member.heartbeat(member.generation, None, 1.1)
    # The answer with the new epoch was lost: the client heartbeats with the old one.
    assert member.heartbeat(member.generation - 1, frozenset({A, B}), 1.2) == (NONE, frozenset({A}))
    assert member.revoking == {B}


def test_an_older_epoch_is_fenced():
    member = joined_member()
    member.stop(frozenset({B}), 1.0)
    member.heartbeat(member.generation, None, 1.1)
    assert member.heartbeat(member.generation - 2, frozenset({A, B}), 1.2) == (kip848.FENCED_MEMBER_EPOCH, None)
    assert member.revoking == {B}


def test_rejoining_at_epoch_zero_releases_everything_it_held():
    member = joined_member()
    member.stop(frozenset({A}), 1.0)
    error, sent = member.heartbeat(kip848.JOIN_EPOCH, None, 1.1)
    assert error == NONE and sent == frozenset({B})
    assert member.revoking == frozenset()


def test_commits_carry_the_member_epoch():
    member = joined_member()
    assert member.commit_error(member.generation, A, 1.0) == NONE
    assert member.commit_error(member.generation - 1, A, 1.0) == kip848.STALE_MEMBER_EPOCH
    assert member.commit_error(member.generation, C, 1.0) == kip848.STALE_MEMBER_EPOCH


def test_a_member_that_does_not_revoke_within_its_rebalance_timeout_is_gone():
    member = joined_member()
    member.stop(frozenset({B}), 1.0)
    for t in range(2, 21):
        member.heartbeat(member.generation, frozenset({A, B}), float(t))  # heartbeats, never revokes
    assert member.expire(20.9) is None
    assert member.expire(21.0) == {B}
    assert member.heartbeat(member.generation, frozenset({A}), 21.1) == (UNKNOWN_MEMBER_ID, None)


def test_a_silent_member_expires_after_its_session_timeout():
    member = joined_member()
    assert member.expire(6.2) is None
    assert member.expire(6.3) == frozenset()


def test_a_partition_whose_topic_cannot_be_named_yet_waits_in_the_target():
    member = ConsumerMember("m-1", ("t", "u"), session_timeout_ms=6000, rebalance_timeout_ms=20000)
    member.heartbeat(kip848.JOIN_EPOCH, None, 0.0)
    u0 = TopicPartition("u", 0)
    member.start({A: 0, u0: 0}, 0.1)
    named = {"t"}
    error, sent = member.heartbeat(member.generation, frozenset(), 0.2, sendable=lambda tp: tp.topic in named)
    assert sent == frozenset({A}) and u0 not in member.holding
    named.add("u")
    error, sent = member.heartbeat(member.generation, frozenset({A}), 0.3, sendable=lambda tp: tp.topic in named)
    assert sent == frozenset({A, u0})


def test_a_suspended_member_is_sent_an_empty_target():
    member = joined_member()
    member.suspend(True, 1.0)
    assert member.heartbeat(member.generation, frozenset({A, B}), 1.1) == (NONE, frozenset())
    assert member.stop(frozenset({A}), 1.2) == frozenset()  # still owned
    member.heartbeat(member.generation, frozenset(), 1.3)
    assert member.revoking == frozenset()


def test_a_kip848_client_is_warned_its_heartbeat_interval_and_a_second_before_the_lease_ends():
    """The broker sets a KIP-848 client's heartbeat interval, so it knows its pace."""
    member = ConsumerMember("m-1", ("t",), session_timeout_ms=45000, rebalance_timeout_ms=20000,
                            heartbeat_interval_s=5.0)
    assert member.lease_at_risk(7.49) and not member.lease_at_risk(7.51)  # a sixth of 45 s is longer
    member = ConsumerMember("m-2", ("t",), session_timeout_ms=30000, rebalance_timeout_ms=20000,
                            heartbeat_interval_s=5.0)
    assert member.lease_at_risk(5.99) and not member.lease_at_risk(6.01)  # 5 s to hear it, 1 s to let go


def test_a_server_assignor_is_taken_by_zkcoords_name_or_kafkas_and_an_unknown_one_refused():
    assert kip848.strategies_for("range") == ("range",)
    assert kip848.strategies_for("uniform") == ("sticky",)  # Kafka's default server assignor
    assert kip848.strategies_for(None)[0] == "sticky" and kip848.strategies_for("") == kip848.strategies_for(None)
    with pytest.raises(kip848.UnsupportedAssignor, match="'fancy' is not supported; supported: range, roundrobin"):
        kip848.strategies_for("fancy")
