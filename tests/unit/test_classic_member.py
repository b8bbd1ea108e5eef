"""The classic group protocol's decisions for a bridged stock client
(broker/groups/classic.py), interleaving by interleaving, on a manual clock.

The rule under test: a partition the coordinator stops is released (its Stop
answered) only once the client can no longer be fetching it."""

from __future__ import annotations

import pytest

from zkcoord.broker.groups import classic
from zkcoord.broker.groups.classic import ClassicMember, Phase
from zkcoord.records import TopicPartition

A, B, C = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("t", 2)


def stable_member(protocol: str = "range", assignment=(A, B), now: float = 0.0) -> ClassicMember:
    """A member that joined, was given ``assignment`` and synced."""
    member = ClassicMember("m-1", ("t",), protocol_name=protocol, session_timeout_ms=6000, rebalance_timeout_ms=20000,
                           last_heard=now)
    member.start({tp: 0 for tp in assignment}, now)
    member.join(None, now)
    assert member.sync(member.generation, now) == (classic.NONE, frozenset(assignment))
    return member


def test_a_stable_member_heartbeats_without_error():
    member = stable_member()
    assert member.heartbeat(member.generation, 1.0) == classic.NONE
    assert member.heartbeat(member.generation - 1, 1.0) == classic.ILLEGAL_GENERATION


def test_an_eager_client_releases_a_stopped_partition_only_when_it_joins_again():
    member = stable_member("range")
    assert member.stop(frozenset({B}), 1.0) == frozenset()  # still fetching it
    assert member.revoking == {B}
    assert member.heartbeat(member.generation, 1.5) == classic.REBALANCE_IN_PROGRESS
    # An eager client revokes everything before its JoinGroup.
    assert member.join(None, 2.0) == {B}
    assert member.revoking == frozenset()
    assert member.sync(member.generation, 2.1) == (classic.NONE, frozenset({A}))
    assert member.heartbeat(member.generation, 2.5) == classic.NONE


def test_a_cooperative_client_releases_a_partition_once_its_join_no_longer_owns_it():
    member = stable_member("cooperative-sticky")
    assert member.stop(frozenset({B}), 1.0) == frozenset()
    assert member.heartbeat(member.generation, 1.2) == classic.REBALANCE_IN_PROGRESS
    # First join: it still owns both (cooperative clients keep fetching while they rejoin).
    assert member.join(frozenset({A, B}), 1.5) == frozenset()
    assert member.sync(member.generation, 1.6) == (classic.NONE, frozenset({A}))
    assert member.revoking == {B}
    # It revokes B and joins again, owning only A: now B is released.
    assert member.join(frozenset({A}), 2.0) == {B}
    assert member.sync(member.generation, 2.1) == (classic.NONE, frozenset({A}))
    assert member.heartbeat(member.generation, 2.2) == classic.NONE


def test_a_cooperative_client_cannot_claim_partitions_it_was_never_given():
    member = stable_member("cooperative-sticky", assignment=(A,))
    member.stop(frozenset({A}), 1.0)
    # It says it owns C (never given) and not A: A is released, C is not held.
    assert member.join(frozenset({C}), 1.5) == {A}
    assert member.holding == frozenset()


@pytest.mark.parametrize("owned, released", [
    (None, {A, B}),             # a subscription that cannot say: an eager client, holding nothing
    (frozenset(), {A, B}),      # an eager client says it owns nothing
    (frozenset({A, B}), set()),  # a cooperative one still fetching both: neither is released
])
def test_a_client_under_an_assignor_name_zkcoord_does_not_know_is_believed_on_what_it_owns(owned, released):
    member = stable_member("custom-assignor")
    assert not member.cooperative and member.client_kind == "classic-eager"
    member.stop(frozenset({A, B}), 1.0)
    assert member.join(owned, 1.5) == released


def test_kafkajs_round_robin_is_an_eager_client():
    member = stable_member("RoundRobinAssigner")
    member.stop(frozenset({B}), 1.0)
    assert member.join(frozenset({A, B}), 1.5) == {B}  # it revoked everything, whatever it says


def test_a_stop_between_join_and_sync_of_an_eager_client_is_released_at_once():
    member = stable_member("range")
    member.start({A: 0, B: 0, C: 0}, 1.0)
    assert member.heartbeat(member.generation, 1.1) == classic.REBALANCE_IN_PROGRESS
    member.join(None, 1.2)  # holds nothing until it syncs
    assert member.stop(frozenset({C}), 1.3) == {C}
    assert member.sync(member.generation, 1.4) == (classic.NONE, frozenset({A, B}))


def test_a_start_that_grows_the_assignment_asks_the_client_to_join_again():
    member = stable_member("range", assignment=(A,))
    member.commit(A, 5)
    member.start({A: 0, B: 7}, 1.0)
    assert member.heartbeat(member.generation, 1.1) == classic.REBALANCE_IN_PROGRESS
    member.join(None, 1.2)
    assert member.sync(member.generation, 1.3) == (classic.NONE, frozenset({A, B}))
    assert member.committed == {A: 5}


def test_a_partition_granted_again_forgets_what_was_committed_before_it_left():
    member = stable_member("range", assignment=(A, B))
    member.commit(B, 10)
    member.stop(frozenset({B}), 1.0)
    member.join(None, 1.1)
    member.sync(member.generation, 1.2)
    member.start({A: 0, B: 42}, 5.0)  # the coordinator's offset, committed by someone else since
    assert B not in member.committed


def test_commits_are_taken_for_held_partitions_of_the_current_generation_only():
    member = stable_member("range", assignment=(A,))
    assert member.commit_error(member.generation, A, 1.0) == classic.NONE
    assert member.commit_error(member.generation, B, 1.0) == classic.ILLEGAL_GENERATION
    assert member.commit_error(member.generation + 1, A, 1.0) == classic.ILLEGAL_GENERATION
    member.leave()
    assert member.commit_error(member.generation, A, 1.0) == classic.UNKNOWN_MEMBER_ID


def test_a_partition_being_revoked_can_still_be_committed_before_it_is_let_go():
    member = stable_member("range")
    member.stop(frozenset({B}), 1.0)
    assert member.commit_error(member.generation, B, 1.1) == classic.NONE


def test_leaving_releases_everything_and_refuses_what_follows():
    member = stable_member("range")
    member.stop(frozenset({A}), 1.0)
    assert member.leave() == {A}
    assert member.gone
    assert member.heartbeat(member.generation, 1.1) == classic.UNKNOWN_MEMBER_ID
    assert member.sync(member.generation, 1.1) == (classic.UNKNOWN_MEMBER_ID, frozenset())


def test_a_silent_member_expires_after_its_session_timeout_and_releases_its_revocations():
    member = stable_member("range", now=0.0)
    assert member.expire(5.9) is None
    assert member.expire(6.0) == frozenset()
    assert member.phase is Phase.GONE


def test_a_member_asked_to_rejoin_has_its_rebalance_timeout_to_do_it_while_it_heartbeats():
    member = stable_member("range", now=0.0)
    member.stop(frozenset({A}), 1.0)
    for t in range(1, 21):  # its revocation callback runs long; its heartbeats go on
        assert member.heartbeat(member.generation, float(t)) == classic.REBALANCE_IN_PROGRESS
    assert member.expire(20.9) is None
    assert member.expire(21.0) == {A}


def test_a_member_asked_to_rejoin_that_falls_silent_is_gone_after_its_session_timeout():
    """The client went elsewhere (to the group's new coordinator broker, under
    a new member id): the member it left behind, given partitions by a Start,
    must not hold them for the rebalance timeout (minutes by default)."""
    member = stable_member("range", assignment=(), now=0.0)
    member.heartbeat(member.generation, 1.0)
    member.start({A: 0, B: 0}, 2.0)  # asks it to rejoin for the new partitions
    assert member.needs_rejoin()
    assert member.expire(6.9) is None
    assert member.expire(7.0) == frozenset()
    assert member.gone


def test_a_joined_member_that_never_syncs_expires_after_its_session_timeout():
    member = ClassicMember("m", ("t",), session_timeout_ms=6000, rebalance_timeout_ms=20000)
    member.join(None, 0.0)
    assert member.expire(5.9) is None
    assert member.expire(6.0) is not None
    short = ClassicMember("m", ("t",), session_timeout_ms=6000, rebalance_timeout_ms=4000)
    short.join(None, 0.0)
    assert short.expire(4.0) is not None  # nor after its rebalance timeout, if that is shorter


def test_a_joining_member_never_expires_while_its_join_is_answered():
    member = ClassicMember("m", ("t",), session_timeout_ms=6000, rebalance_timeout_ms=20000)
    assert member.expire(1000.0) is None


def test_a_retried_sync_gets_the_same_assignment():
    member = stable_member("range")
    assert member.sync(member.generation, 1.0) == (classic.NONE, frozenset({A, B}))


def test_a_suspended_member_is_asked_to_let_everything_go_and_gets_it_back_after():
    member = stable_member("cooperative-sticky")
    member.suspend(True, 1.0)
    assert member.heartbeat(member.generation, 1.1) == classic.REBALANCE_IN_PROGRESS
    member.join(frozenset({A, B}), 1.2)
    assert member.sync(member.generation, 1.3) == (classic.NONE, frozenset())
    member.join(frozenset(), 1.4)
    assert member.holding == frozenset()
    assert member.sync(member.generation, 1.45) == (classic.NONE, frozenset())
    # A Stop now is released at once: the client holds nothing.
    assert member.stop(frozenset({B}), 1.5) == {B}
    member.suspend(False, 2.0)
    assert member.heartbeat(member.generation, 2.2) == classic.REBALANCE_IN_PROGRESS
    member.join(frozenset(), 2.3)
    assert member.sync(member.generation, 2.4) == (classic.NONE, frozenset({A}))


# -- the warning before the registration's lease ends (member.lease_warning_s) -------------------


def _warned_at(member, lease_end: float, start: float) -> float:
    """When the bridge, looking every 0.25 s as its expiry loop does, first
    finds the member's lease at risk."""
    now = start
    while not member.lease_at_risk(lease_end - now):
        now += 0.25
    return now


def _renewed_every_third(session_s: float, start: float, end: float):
    """The registration's lease deadline over time while every ping comes on
    time: pings every third of the session, each renewing the lease from the
    answer before it (docs/DESIGN.md, the lease rule)."""
    t = start
    while t < end:
        yield t, t - session_s / 3 + session_s  # based on the previous answer, a third ago
        t += 0.05


@pytest.mark.parametrize("session_s, heartbeat_s", [(10.0, 3.0), (10.0, 1.5), (3.0, 0.5), (45.0, 3.0)])
def test_no_client_is_warned_while_every_ping_comes_on_time(session_s, heartbeat_s):
    """Just before each ping the lease has a third of the session left: a
    warning longer than that asked every client to let go at every ping."""
    member = ClassicMember("m-1", ("t",), session_timeout_ms=int(session_s * 1000), rebalance_timeout_ms=20000,
                           heartbeat_interval_s=heartbeat_s)
    for t, deadline in _renewed_every_third(session_s, 0.0, 3 * session_s):
        left = deadline - (t + session_s / 3 - 0.01)  # looked at just before the next ping
        assert not member.lease_at_risk(left), (t, left)


@pytest.mark.parametrize("protocol", ["range", "cooperative-sticky"])
@pytest.mark.parametrize("lease_end", [21.0 + 0.25 * k for k in range(12)])  # every phase of its heartbeats
def test_a_client_heartbeating_every_1_5s_lets_go_before_a_10s_lease_ends(protocol, lease_end):
    """Warned a sixth of the session before the end (1.7 s), a client
    heartbeating every 1.5 s could hear it only 0.2 s before the end, too
    late to let go; warned its heartbeat and a second before, it lets go in time."""
    member = ClassicMember("m-1", ("t",), protocol_name=protocol, session_timeout_ms=10000,
                           rebalance_timeout_ms=20000)
    member.start({A: 0, B: 0}, 0.0)
    member.join(None, 0.0)
    member.sync(member.generation, 0.0)
    beats = [1.5 * k for k in range(1, 30)]
    for t in beats:
        if t > 12.0:
            break
        assert member.heartbeat(member.generation, t) == classic.NONE
    warned = _warned_at(member, lease_end, 12.0)
    member.suspend(True, warned)
    heard = next(t for t in beats if t >= warned)
    assert member.heartbeat(member.generation, heard) == classic.REBALANCE_IN_PROGRESS
    # It revokes at its next poll and joins (within a second): what it holds is let go.
    member.join(frozenset() if member.cooperative else None, heard + 0.9)
    assert member.holding == frozenset()
    assert heard + 0.9 < lease_end


def test_the_warning_follows_the_pace_the_client_shows():
    member = stable_member("range")  # session 6 s: warned between 1 s and 1.5 s before the end
    # Before it has shown a pace: a third of its session (2 s): as long as a 6 s lease allows.
    assert member.lease_at_risk(1.49) and not member.lease_at_risk(1.51)
    for t in (1.0, 1.2, 1.4, 1.6):
        member.heartbeat(member.generation, t)
    # Every 0.2 s: 0.2 s to hear it and a second to let go.
    assert member.lease_at_risk(1.19) and not member.lease_at_risk(1.21)
    # A client paused for a second shows it: warned sooner.
    member.heartbeat(member.generation, 2.6)
    assert member.lease_at_risk(1.49) and not member.lease_at_risk(1.51)
