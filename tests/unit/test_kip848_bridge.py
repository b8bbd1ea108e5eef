"""The group bridge's part of KIP-848 that Kafka's own coordinator decides alike.

- A Stop waits for the client to let its partitions go for as long as Kafka
  waits for a revocation: the member's rebalance timeout, while it keeps
  heartbeating; only then is it dropped.
- A static instance id held by a live KIP-848 member is refused to another
  member id (UNRELEASED_INSTANCE_ID) until its holder leaves.

The bridge runs on a manual clock; its registrations with the coordinator
are I/O, left out (a member added by hand, or registration answered NONE).
"""

from __future__ import annotations

import gevent
import pytest

from zkcoord.broker.groups import kip848
from zkcoord.broker.groups.bridge import GroupBridge, _MemberListener
from zkcoord.broker.groups.kip848 import ConsumerMember
from zkcoord.broker.groups.member import NONE
from zkcoord.broker.groups.messages import ConsumerGroupHeartbeatRequest
from zkcoord.records import TopicPartition

A, B = TopicPartition("t", 0), TopicPartition("t", 1)
SESSION_MS, REBALANCE_MS = 6000, 20000


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def bridge(clock):
    bridge = GroupBridge(1, None, lambda: {}, lambda: {}, heartbeat_interval_ms=2000,
                         session_timeout_ms=SESSION_MS, fence_idle_ms=600_000, clock=clock)
    yield bridge
    bridge.close()


def stable_member(bridge, member_id="k-1", instance_id=None):
    member = ConsumerMember(member_id=member_id, topics=("t",), session_timeout_ms=SESSION_MS,
                            rebalance_timeout_ms=REBALANCE_MS, instance_id=instance_id)
    bridged = bridge._add(member, "g")
    member.heartbeat(kip848.JOIN_EPOCH, None, 0.0)
    member.start({A: 0, B: 0}, 0.0)
    member.heartbeat(member.generation, frozenset(), 0.0)  # sent A and B: held from now
    return bridged


def heartbeats_until(clock, bridged, end: float, owned) -> None:
    """The client heartbeats every half second until ``end``, owning ``owned``."""
    member = bridged.member
    while clock.now < end and not member.gone:
        clock.now = min(end, clock.now + 0.5)
        member.heartbeat(member.generation, frozenset(owned), clock.now)
        bridged.notify()
        gevent.sleep(0.01)  # the Stop being answered looks again


def test_a_stop_waits_for_the_release_past_half_a_session_while_the_client_heartbeats(bridge, clock):
    bridged = stable_member(bridge)
    stopping = gevent.spawn(_MemberListener(bridged, bridge).on_stop, frozenset({B}))
    gevent.sleep(0.01)
    heartbeats_until(clock, bridged, SESSION_MS / 1000.0 + 2.0, {A, B})  # keeps B past a whole session
    assert not bridged.member.gone and not stopping.ready()
    bridged.member.commit(B, 42)
    heartbeats_until(clock, bridged, clock.now + 0.5, {A})  # lets B go
    assert stopping.get(timeout=5) == {B: 42}
    assert not bridged.member.gone


def test_a_client_that_keeps_a_stopped_partition_past_its_rebalance_timeout_is_dropped(bridge, clock):
    bridged = stable_member(bridge)
    stopping = gevent.spawn(_MemberListener(bridged, bridge).on_stop, frozenset({B}))
    gevent.sleep(0.01)
    heartbeats_until(clock, bridged, REBALANCE_MS / 1000.0 - 0.5, {A, B})
    assert not bridged.member.gone
    heartbeats_until(clock, bridged, REBALANCE_MS / 1000.0 + 1.0, {A, B})
    assert stopping.get(timeout=5) == {}  # abandoned: the coordinator fences instead
    assert bridged.member.gone


def join(member_id: str, instance_id: str, epoch: int = kip848.JOIN_EPOCH):
    request = ConsumerGroupHeartbeatRequest(
        version=0, group_id="g", member_id=member_id, member_epoch=epoch, instance_id=instance_id, rack_id=None,
        rebalance_timeout_ms=REBALANCE_MS, subscribed_topic_names=["t"], server_assignor=None, topic_partitions=[])
    request.with_header(correlation_id=1, client_id=f"client-{member_id}")
    return request


def test_a_static_instance_id_held_by_a_live_member_is_unreleased(bridge):
    holder = stable_member(bridge, "k-1", instance_id="s1")
    answer = bridge.consumer_group_heartbeat(join("k-2", "s1"), "10.0.0.2")
    assert answer.error_code == kip848.UNRELEASED_INSTANCE_ID
    assert bridge._find("g", "k-1") is holder and not holder.member.gone
    assert bridge._find("g", "k-2") is None


def test_a_static_instance_id_its_holder_left_for_a_while_may_be_taken(bridge, monkeypatch):
    stable_member(bridge, "k-1", instance_id="s1")
    left = bridge.consumer_group_heartbeat(join("k-1", "s1", epoch=kip848.STATIC_LEAVE_EPOCH), "10.0.0.1")
    assert left.error_code == NONE
    monkeypatch.setattr(bridge, "_register", lambda bridged, strategies: NONE)  # the coordinator's part: I/O
    answer = bridge.consumer_group_heartbeat(join("k-2", "s1"), "10.0.0.2")
    assert answer.error_code == NONE and answer.member_id == "k-2"
