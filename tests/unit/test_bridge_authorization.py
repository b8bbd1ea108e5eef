"""The group bridge asks the authorizer on every group API, and a member is
its principal's: another principal's SyncGroup, Heartbeat, LeaveGroup or
commit about it is about an unknown member (a review found LeaveGroup by
group.instance.id dropping another principal's static member unasked)."""

from __future__ import annotations

import pytest

from zkcoord.broker.groups import answers, classic
from zkcoord.broker.groups.bridge import GroupBridge
from zkcoord.broker.groups.classic import ClassicMember
from zkcoord.broker.protocol import HeartbeatRequest, LeaveGroupRequest, SyncGroupRequest
from zkcoord.security import acl
from zkcoord.security.principal import user

ALICE, MALLORY = user("alice"), user("mallory")


@pytest.fixture
def bridge():
    asked = []

    def authorize(principal, operation, resource, host):
        asked.append((principal, operation, resource))
        return principal in (ALICE, MALLORY) and resource == acl.group("g")  # both may read group g

    bridge = GroupBridge(1, None, lambda: {}, lambda: {}, heartbeat_interval_ms=3000, session_timeout_ms=10000,
                         fence_idle_ms=600_000, authorize=authorize)
    member = ClassicMember(member_id="m-alice", topics=("t",), session_timeout_ms=10000, rebalance_timeout_ms=10000,
                           instance_id="s1", principal=ALICE)
    bridge._add(member, "g")
    bridge.asked = asked
    yield bridge
    bridge.close()


def leave_by_instance(group="g"):
    return LeaveGroupRequest(version=3, group_id=group,
                             members=[LeaveGroupRequest.MemberIdentity(member_id="", group_instance_id="s1")])


def test_another_principal_cannot_make_a_static_member_leave(bridge):
    answer = bridge.leave_group(leave_by_instance(), MALLORY, "10.0.0.9")
    assert answer.members[0].error_code == classic.UNKNOWN_MEMBER_ID
    assert bridge._find("g", "m-alice") is not None
    answer = bridge.leave_group(leave_by_instance(), ALICE, "10.0.0.1")
    assert answer.members[0].error_code == 0 and bridge._find("g", "m-alice") is None


def test_every_group_api_asks_the_authorizer(bridge):
    stranger = user("eve")
    sync = SyncGroupRequest(version=3, group_id="g", generation_id=1, member_id="m-alice", group_instance_id="s1",
                            assignments=[])
    assert bridge.sync_group(sync, stranger, "10.0.0.9").error_code == answers.GROUP_AUTHORIZATION_FAILED
    heartbeat = HeartbeatRequest(version=3, group_id="g", generation_id=1, member_id="m-alice",
                                 group_instance_id="s1")
    assert bridge.heartbeat(heartbeat, stranger, "10.0.0.9").error_code == answers.GROUP_AUTHORIZATION_FAILED
    assert bridge.leave_group(leave_by_instance(), stranger, "10.0.0.9").error_code == \
        answers.GROUP_AUTHORIZATION_FAILED
    assert bridge._find("g", "m-alice") is not None
    assert {(principal, operation) for principal, operation, _ in bridge.asked} == {(stranger, acl.READ)}
    # Allowed on the group but not the member's principal: an unknown member.
    assert bridge.heartbeat(heartbeat, MALLORY, "10.0.0.9").error_code == classic.UNKNOWN_MEMBER_ID


def test_an_empty_group_id_is_refused_not_a_crash(bridge):
    # Found by the fuzz (DescribeGroups of ""; tests/e2e/test_fuzz.py): an
    # empty group id raised in the ACL check and closed the connection with a traceback.
    from zkcoord.broker.protocol import FindCoordinatorRequest

    stranger = user("eve")
    found = bridge.find_coordinator(FindCoordinatorRequest(version=1, key="", key_type=0), stranger, "10.0.0.9")
    assert found.error_code == answers.GROUP_AUTHORIZATION_FAILED
    heartbeat = HeartbeatRequest(version=3, group_id="", generation_id=1, member_id="m", group_instance_id=None)
    assert bridge.heartbeat(heartbeat, stranger, "10.0.0.9").error_code == answers.GROUP_AUTHORIZATION_FAILED


# -- member ids are no secret: another principal never takes a live member's place ----------------

def join_as(member_id: str):
    from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription, ConsumerProtocolType
    from zkcoord.broker.protocol import JoinGroupRequest

    subscription = ConsumerProtocolSubscription(version=0, topics=["t"], user_data=None).encode()
    return JoinGroupRequest(version=5, group_id="g", session_timeout_ms=10000, rebalance_timeout_ms=10000,
                            member_id=member_id, group_instance_id=None, protocol_type=ConsumerProtocolType,
                            protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range",
                                                                                  metadata=subscription)])


def test_another_principal_joining_under_a_live_member_id_is_refused_and_the_member_kept(bridge):
    alices = bridge._find("g", "m-alice")
    answer = bridge.join_group(join_as("m-alice"), "10.0.0.9", MALLORY)
    assert answer.error_code == classic.UNKNOWN_MEMBER_ID
    assert bridge._find("g", "m-alice") is alices and not alices.member.gone


def test_another_principal_joining_a_kip848_member_id_is_refused_and_the_member_kept(bridge):
    from zkcoord.broker.groups.kip848 import ConsumerMember
    from zkcoord.broker.groups.messages import ConsumerGroupHeartbeatRequest

    alices = bridge._add(ConsumerMember(member_id="k-alice", topics=("t",), session_timeout_ms=10000,
                                        rebalance_timeout_ms=10000, principal=ALICE), "g")
    heartbeat = ConsumerGroupHeartbeatRequest(
        version=0, group_id="g", member_id="k-alice", member_epoch=0, instance_id=None, rack_id=None,
        rebalance_timeout_ms=10000, subscribed_topic_names=["t"], server_assignor=None, topic_partitions=[])
    answer = bridge.consumer_group_heartbeat(heartbeat, "10.0.0.9", MALLORY)
    assert answer.error_code == classic.UNKNOWN_MEMBER_ID
    assert bridge._find("g", "k-alice") is alices and not alices.member.gone


# -- Kafka's admin tools: a commit from outside the group, OffsetDelete ---------------------------

def test_a_commit_from_outside_the_group_and_an_offset_delete_ask_what_kafka_asks(bridge):
    """kafka-consumer-groups --reset-offsets commits with no member id and no
    generation (Read on the group, as any commit), --delete-offsets asks
    Delete on the group: refused before the coordinator or ZooKeeper is asked."""
    from zkcoord.broker.protocol import OffsetCommitRequest, OffsetDeleteRequest

    stranger = user("eve")
    Topic = OffsetCommitRequest.OffsetCommitRequestTopic
    commit = OffsetCommitRequest(version=8, group_id="g", generation_id_or_member_epoch=-1, member_id="",
                                 group_instance_id=None, retention_time_ms=-1, topics=[
                                     Topic(name="t", partitions=[Topic.OffsetCommitRequestPartition(
                                         partition_index=0, committed_offset=5, committed_leader_epoch=-1,
                                         committed_metadata="")])])
    answer = bridge.offset_commit(commit, stranger, "10.0.0.9")
    assert [p.error_code for t in answer.topics for p in t.partitions] == [answers.GROUP_AUTHORIZATION_FAILED]
    Deleted = OffsetDeleteRequest.OffsetDeleteRequestTopic
    delete = OffsetDeleteRequest(version=0, group_id="g", topics=[
        Deleted(name="t", partitions=[Deleted.OffsetDeleteRequestPartition(partition_index=0)])])
    answer = bridge.offset_delete(delete, stranger, "10.0.0.9")
    assert (answer.error_code, answer.topics) == (answers.GROUP_AUTHORIZATION_FAILED, [])
    assert {(principal, operation) for principal, operation, _ in bridge.asked} == {
        (stranger, acl.READ), (stranger, acl.DELETE)}
