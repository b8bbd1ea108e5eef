"""What the bridge answers stock clients, decided without I/O.

The Kafka error codes the group APIs answer with, what a refusal of the
coordinator becomes for a client, the bytes of the consumer protocol's
assignments and subscriptions, and the small decisions of the bridge's
handlers that need no socket, no ZooKeeper and no clock of their own: each
takes what it judges and returns the answer. ``bridge.py`` and its API
parts carry them out.
"""

from __future__ import annotations

from typing import AbstractSet, Mapping, Optional

from kafka import errors as kafka_errors
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription

from zkcoord import wire
from zkcoord.broker.groups import classic
from zkcoord.records import TopicPartition

NONE = classic.NONE
COORDINATOR_NOT_AVAILABLE = kafka_errors.CoordinatorNotAvailableError.errno
INVALID_GROUP_ID = kafka_errors.InvalidGroupIdError.errno
INCONSISTENT_GROUP_PROTOCOL = kafka_errors.InconsistentGroupProtocolError.errno
INVALID_SESSION_TIMEOUT = kafka_errors.InvalidSessionTimeoutError.errno
MEMBER_ID_REQUIRED = kafka_errors.MemberIdRequiredError.errno
FENCED_INSTANCE_ID = kafka_errors.FencedInstanceIdError.errno
GROUP_ID_NOT_FOUND = kafka_errors.GroupIdNotFoundError.errno
INVALID_REQUEST = kafka_errors.InvalidRequestError.errno
UNKNOWN_SERVER_ERROR = kafka_errors.UnknownError.errno
OFFSET_OUT_OF_RANGE = kafka_errors.OffsetOutOfRangeError.errno
GROUP_AUTHORIZATION_FAILED = kafka_errors.GroupAuthorizationFailedError.errno
TOPIC_AUTHORIZATION_FAILED = kafka_errors.TopicAuthorizationFailedError.errno
SASL_AUTHENTICATION_FAILED = kafka_errors.SaslAuthenticationFailedError.errno
POLICY_VIOLATION = kafka_errors.PolicyViolationError.errno
GROUP_SUBSCRIBED_TO_TOPIC = kafka_errors.GroupSubscribedToTopicError.errno
# What a refused registration becomes for the client.
REGISTRATION_REFUSALS = {
    wire.ErrorCode.INVALID_SESSION_TIMEOUT: INVALID_SESSION_TIMEOUT,
    wire.ErrorCode.NO_COMMON_STRATEGY: INCONSISTENT_GROUP_PROTOCOL,
    wire.ErrorCode.INVALID_REGISTRATION: INVALID_REQUEST,
    wire.ErrorCode.AUTHENTICATION_FAILED: SASL_AUTHENTICATION_FAILED,
    wire.ErrorCode.GROUP_AUTHORIZATION_FAILED: GROUP_AUTHORIZATION_FAILED,
    wire.ErrorCode.TOPIC_AUTHORIZATION_FAILED: TOPIC_AUTHORIZATION_FAILED,
    wire.ErrorCode.STATIC_MEMBER_OWNED_BY_OTHER_PRINCIPAL: FENCED_INSTANCE_ID,
}
# What a reset the coordinator refused becomes for a client committing from
# outside the group. Kafka answers UNKNOWN_MEMBER_ID to such a commit while
# the group has members; ZooKeeper's answers are retried as Kafka's
# coordinator moving (the admin client asks again).
RESET_REFUSALS = {
    wire.ErrorCode.NONE: NONE,
    wire.ErrorCode.GROUP_NOT_EMPTY: classic.UNKNOWN_MEMBER_ID,
    wire.ErrorCode.REBALANCE_IN_PROGRESS: classic.REBALANCE_IN_PROGRESS,
    wire.ErrorCode.NOT_COORDINATOR: COORDINATOR_NOT_AVAILABLE,
    wire.ErrorCode.COORDINATOR_NOT_AVAILABLE: COORDINATOR_NOT_AVAILABLE,
    wire.ErrorCode.UNKNOWN_PARTITION: kafka_errors.UnknownTopicOrPartitionError.errno,
    wire.ErrorCode.OFFSET_OUT_OF_RANGE: OFFSET_OUT_OF_RANGE,
    wire.ErrorCode.INVALID_REQUEST: INVALID_REQUEST,
    wire.ErrorCode.GROUP_AUTHORIZATION_FAILED: GROUP_AUTHORIZATION_FAILED,
}
# Kafka's type of every group (ListGroups v5): the one whose members and
# offsets DescribeGroups describes, which is how this broker describes a
# group, whatever protocol its members joined with.
GROUP_TYPE = "classic"
# A group whose stored state cannot be read: Kafka's name for a state not known.
UNKNOWN_STATE = "Unknown"

# The most member ids a bridge remembers of each kind it keeps (handed out
# with MEMBER_ID_REQUIRED, fenced static members'), oldest forgotten first.
MAX_PENDING_IDS = 10_000
# A process that went this long between two looks at its clock was stalled
# (paused, starved): its clients' silence over that time proves nothing.
STALL_S = 1.0


class StallWatch:
    """Whether a client's silence may be held against it now: not just after
    the process was stalled, since the clients' requests then wait unread in
    their sockets. Told the time at each look (``judging``), it judges again
    STALL_S after the last look that followed a stall."""

    def __init__(self, now: float):
        self._last_look = self._grace_until = now

    def judging(self, now: float) -> bool:
        if now - self._last_look > STALL_S:
            self._grace_until = now + STALL_S
        self._last_look = now
        return now >= self._grace_until


def beyond_log_end(offset: int, log_end: Optional[int]) -> bool:
    """Whether committing ``offset`` would make the group skip records not yet
    written: past the partition's log end (None: not known here, not judged)."""
    return log_end is not None and offset > log_end


def offset_delete_error(tp: TopicPartition, *, readable: bool, consumed: AbstractSet[str],
                        committed: Mapping[TopicPartition, int]) -> int:
    """OffsetDelete's answer for one partition, Kafka's refusals first: a topic
    the client may not read, a topic the group's members consume. An offset
    moves only through the group's coordinator, which deletes none: a
    committed one is refused (POLICY_VIOLATION); none committed is done."""
    if not readable:
        return TOPIC_AUTHORIZATION_FAILED
    if tp.topic in consumed:
        return GROUP_SUBSCRIBED_TO_TOPIC
    return POLICY_VIOLATION if tp in committed else NONE


def registration_refusal(refusal: wire.WireError) -> int:
    """The Kafka error a client gets for the coordinator's refusal of its registration."""
    return REGISTRATION_REFUSALS.get(refusal.code, UNKNOWN_SERVER_ERROR)


def reset_refusal(code: wire.ErrorCode) -> int:
    """The Kafka error of a commit from outside the group, from its reset's answer."""
    return RESET_REFUSALS.get(code, UNKNOWN_SERVER_ERROR)


def registration_id(member) -> str:
    """The zkcoord consumer id a client's member registers under: its
    group.instance.id if it has one (a static member), else its member id.
    librdkafka makes member ids of standard base64, whose "/" a consumer id
    may not hold."""
    return (member.instance_id or member.member_id).replace("/", "_")


def as_kafka_host(host: str) -> str:
    return "/" + host if host and not host.startswith("/") else host


def by_topic(partitions) -> dict[str, list[int]]:
    grouped: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        grouped.setdefault(topic, []).append(partition)
    return grouped


def assignment_bytes(partitions, version: int) -> bytes:
    Assigned = ConsumerProtocolAssignment.TopicPartition
    assignment = ConsumerProtocolAssignment(
        version=version, user_data=None,
        assigned_partitions=[Assigned(topic=t, partitions=ps) for t, ps in by_topic(partitions).items()])
    return bytes(assignment.encode(version=version))


def subscription_bytes(partitions) -> bytes:
    """A subscription for a member we know only by its partitions (a thin consumer)."""
    subscription = ConsumerProtocolSubscription(version=0, topics=sorted(by_topic(partitions)), user_data=None)
    return bytes(subscription.encode(version=0))
