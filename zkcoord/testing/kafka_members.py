"""Thousands of Kafka group members in one process, speaking Kafka's own
group protocols to a Kafka cluster: a load generator for the comparison with
Kafka's group coordinator (bench/bench_vs_kafka.py).

A member is a greenlet (the process is gevent-patched) with its own
connection to the group's coordinator, sending what the reference Java
client sends, at the versions Kafka 4 accepts:

- :class:`ClassicMember`, the classic protocol: FindCoordinator, JoinGroup
  (with the member id the coordinator requires first), SyncGroup (the leader
  assigns: ``range`` eager, or ``cooperative-sticky``, which gives a member
  only partitions nobody owns and rejoins once it has revoked what moves),
  and Heartbeat every ``heartbeat_interval_ms``;
- :class:`ConsumerProtocolMember`, KIP-848: ConsumerGroupHeartbeat every
  interval the coordinator names, the server assigning (``uniform``); a
  member revokes what is taken away and acknowledges its new assignment at
  once, as the Java client does.

Members commit nothing and fetch nothing: what they tell their listener
(``on_start`` with every partition now held, ``on_stop`` with those let go,
as a zkcoord member's listener is told) is the moment a member may fetch a
partition, or must stop. :meth:`KafkaMember.kill` closes its connection and
stops it at once, with no LeaveGroup: what kill -9 of a client looks like
from the coordinator.
"""

from __future__ import annotations

import logging
import socket
import struct
import uuid
from dataclasses import dataclass
from typing import Optional, Sequence

import gevent
from kafka.protocol.consumer.group import (
    HeartbeatRequest, HeartbeatResponse, JoinGroupRequest, JoinGroupResponse, SyncGroupRequest, SyncGroupResponse,
)
from kafka.protocol.metadata.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse

from zkcoord.broker.groups.messages import ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse
from zkcoord.errors import ZkcoordError

log = logging.getLogger(__name__)

# The versions sent: the newest kafka-python describes, each accepted by Kafka 4.
FIND_COORDINATOR_VERSION = 4
JOIN_GROUP_VERSION = 9
SYNC_GROUP_VERSION = 5
HEARTBEAT_VERSION = 4
CONSUMER_GROUP_HEARTBEAT_VERSION = 1
GROUP_KEY_TYPE = 0
PROTOCOL_TYPE = "consumer"
EAGER_RANGE = "range"
COOPERATIVE_STICKY = "cooperative-sticky"
CONSUMER_PROTOCOL = "consumer"
PROTOCOLS = (EAGER_RANGE, COOPERATIVE_STICKY, CONSUMER_PROTOCOL)

# Kafka's error codes these members act on.
NONE = 0
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
ILLEGAL_GENERATION = 22
UNKNOWN_MEMBER_ID = 25
REBALANCE_IN_PROGRESS = 27
MEMBER_ID_REQUIRED = 79
FENCED_MEMBER_EPOCH = 110
COORDINATOR_MOVED = (COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR)
LOST_PLACE = (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH)

RETRY_BACKOFF_S = 0.1  # the Java client's retry.backoff.ms
REQUEST_TIMEOUT_S = 30.0  # the Java client's request.timeout.ms
JOIN_GRACE_S = 5.0  # a JoinGroup may wait the rebalance timeout and this (as in the Java client)
SIZE = struct.Struct(">i")


class KafkaMemberError(ZkcoordError):
    """A Kafka member met an answer it cannot act on."""


class KafkaConnection:
    """One blocking connection to a Kafka broker, one request at a time (as
    Kafka serves a connection's requests in order anyway)."""

    def __init__(self, address: str, client_id: str, timeout_s: float = REQUEST_TIMEOUT_S):
        host, port = address.rsplit(":", 1)
        self.address = address
        self.client_id = client_id
        self.sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.correlation_id = 0

    def call(self, request, response_class):
        self.correlation_id += 1
        request.with_header(correlation_id=self.correlation_id, client_id=self.client_id)
        self.sock.sendall(request.encode(header=True, framed=True))
        size = SIZE.unpack(self._read(SIZE.size))[0]
        response = response_class.decode(self._read(size), version=request.API_VERSION, header=True)
        if response.header.correlation_id != self.correlation_id:
            raise KafkaMemberError(f"{self.address} answered correlation id {response.header.correlation_id}, "
                                   f"not {self.correlation_id}")
        return response

    def _read(self, count: int) -> bytes:
        chunks = []
        while count:
            chunk = self.sock.recv(count)
            if not chunk:
                raise ConnectionError(f"{self.address} closed the connection")
            chunks.append(chunk)
            count -= len(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def find_coordinators(bootstrap: Sequence[str], groups: Sequence[str]) -> dict[str, tuple[int, str]]:
    """(node id, address) of each group's coordinator, from the first broker
    that answers; a group whose coordinator is not available yet is left out."""
    failures = []
    for address in bootstrap:
        try:
            connection = KafkaConnection(address, "zkcoord-bench-find")
        except OSError as exc:
            failures.append(f"{address}: {exc}")
            continue
        try:
            answer = connection.call(FindCoordinatorRequest(
                version=FIND_COORDINATOR_VERSION, key_type=GROUP_KEY_TYPE, coordinator_keys=list(groups)),
                FindCoordinatorResponse)
        except (OSError, ConnectionError) as exc:
            failures.append(f"{address}: {exc}")
            continue
        finally:
            connection.close()
        return {c.key: (c.node_id, f"{c.host}:{c.port}") for c in answer.coordinators if c.error_code == NONE}
    raise KafkaMemberError(f"no Kafka broker answered FindCoordinator: {failures}")


# -- the consumer protocol's embedded formats (ConsumerProtocolSubscription, ConsumerProtocolAssignment) --

def _string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def _int32s(values: Sequence[int]) -> bytes:
    return struct.pack(f">i{len(values)}i", len(values), *values)


def encode_subscription(topic: str, owned: Sequence[int]) -> bytes:
    """ConsumerProtocolSubscription version 1: the topics, no user data, the partitions owned."""
    owned_part = struct.pack(">i", 1) + _string(topic) + _int32s(sorted(owned)) if owned else struct.pack(">i", 0)
    return struct.pack(">hi", 1, 1) + _string(topic) + struct.pack(">i", -1) + owned_part


def _read_string(data: bytes, at: int) -> tuple[str, int]:
    (length,) = struct.unpack_from(">h", data, at)
    return data[at + 2:at + 2 + length].decode(), at + 2 + length


def _read_topic_partitions(data: bytes, at: int) -> tuple[list[int], int]:
    (topics,) = struct.unpack_from(">i", data, at)
    at += 4
    partitions: list[int] = []
    for _ in range(max(topics, 0)):
        _, at = _read_string(data, at)
        (count,) = struct.unpack_from(">i", data, at)
        partitions.extend(struct.unpack_from(f">{count}i", data, at + 4))
        at += 4 + 4 * count
    return partitions, at


def decode_owned(subscription: bytes) -> list[int]:
    """The partitions a ConsumerProtocolSubscription (version 1 or later) says are owned."""
    version, topics = struct.unpack_from(">hi", subscription, 0)
    at = 6
    for _ in range(topics):
        _, at = _read_string(subscription, at)
    (user_data,) = struct.unpack_from(">i", subscription, at)
    at += 4 + max(user_data, 0)
    if version < 1 or at >= len(subscription):
        return []
    return _read_topic_partitions(subscription, at)[0]


def encode_assignment(topic: str, partitions: Sequence[int]) -> bytes:
    """ConsumerProtocolAssignment version 0: one topic's partitions, no user data."""
    return struct.pack(">hi", 0, 1) + _string(topic) + _int32s(sorted(partitions)) + struct.pack(">i", -1)


def decode_assignment(assignment: bytes) -> list[int]:
    if not assignment:
        return []
    return _read_topic_partitions(assignment, 2)[0]


# -- the leader's assignors -------------------------------------------------------------------------

def range_assignment(members: Sequence[str], partitions: int) -> dict[str, list[int]]:
    """Kafka's RangeAssignor on one topic: members in id order, consecutive ranges, the first ones one more."""
    ordered = sorted(members)
    base, extra = divmod(partitions, len(ordered))
    assignment, at = {}, 0
    for i, member in enumerate(ordered):
        count = base + (1 if i < extra else 0)
        assignment[member] = list(range(at, at + count))
        at += count
    return assignment


def cooperative_sticky_assignment(owned: dict[str, Sequence[int]], partitions: int) -> dict[str, list[int]]:
    """The cooperative sticky rule on one topic: balanced counts, each member
    keeps what it owns up to its share, and a partition that must move from
    one member to another is given to nobody this round (its owner revokes
    it and rejoins; the next round gives it out)."""
    members = sorted(owned, key=lambda m: (-len(owned[m]), m))  # the extra slots go to those that own most
    base, extra = divmod(partitions, len(members))
    quota = {m: base + (1 if i < extra else 0) for i, m in enumerate(members)}
    claimed: set[int] = set()
    owned_anywhere: set[int] = set()
    assignment: dict[str, list[int]] = {}
    for member in members:
        kept = []
        for p in sorted(owned[member]):
            if 0 <= p < partitions:
                owned_anywhere.add(p)
                if p not in claimed and len(kept) < quota[member]:
                    kept.append(p)
                    claimed.add(p)
        assignment[member] = kept
    free = iter(p for p in range(partitions) if p not in owned_anywhere)
    for member in members:
        while len(assignment[member]) < quota[member]:
            p = next(free, None)
            if p is None:
                break
            assignment[member].append(p)
    return assignment


# -- members ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class KafkaMemberSettings:
    group: str
    topic: str
    partitions: int  # the topic's count (the classic leader assigns them)
    protocol: str  # one of PROTOCOLS
    session_timeout_ms: int
    heartbeat_interval_ms: int  # the classic client's; KIP-848's coordinator names its own
    rebalance_timeout_ms: int

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise KafkaMemberError(f"protocol must be one of {PROTOCOLS}, not {self.protocol!r}")


class KafkaMember:
    """What both protocols' members share: the listener, the coordinator's
    connection (found again when it moves), the greenlet, and kill."""

    def __init__(self, bootstrap: Sequence[str], settings: KafkaMemberSettings, listener, client_id: str):
        self.bootstrap = list(bootstrap)
        self.settings = settings
        self.listener = listener
        self.client_id = client_id
        self.owned: frozenset = frozenset()
        self.connection: Optional[KafkaConnection] = None
        self.coordinator: Optional[str] = None  # its address, once found
        self.stopped = False
        self.errors = 0
        self.greenlet: Optional[gevent.Greenlet] = None

    def start(self, coordinator: Optional[str] = None) -> "KafkaMember":
        """Start the member; ``coordinator``, if known, saves its first FindCoordinator."""
        self.coordinator = coordinator
        self.greenlet = gevent.spawn(self._run)
        return self

    def kill(self) -> None:
        """Gone at once, without a word: the connection closes, nothing more is sent."""
        self.stopped = True
        if self.connection is not None:
            self.connection.close()
        if self.greenlet is not None:
            self.greenlet.kill(block=False)

    def _run(self) -> None:
        while not self.stopped:
            try:
                if self.connection is None:
                    self._connect()
                self.step()
            except (OSError, ConnectionError, struct.error) as exc:
                self._coordinator_lost(exc)

    def _connect(self) -> None:
        if self.coordinator is None:
            found = find_coordinators(self.bootstrap, [self.settings.group])
            if self.settings.group not in found:
                raise ConnectionError(f"no coordinator for group {self.settings.group} yet")
            self.coordinator = found[self.settings.group][1]
        self.connection = KafkaConnection(self.coordinator, self.client_id,
                                          max(REQUEST_TIMEOUT_S, self.settings.rebalance_timeout_ms / 1000 + JOIN_GRACE_S))

    def _coordinator_lost(self, reason) -> None:
        """Find the coordinator again, after a pause; what is held stays held (as in the Java client)."""
        self.errors += 1
        if self.connection is not None:
            self.connection.close()
        self.connection = None
        self.coordinator = None
        log.debug("%s: coordinator lost: %s", self.client_id, reason)
        gevent.sleep(RETRY_BACKOFF_S)

    def hold(self, target: frozenset) -> None:
        """Revoke what is no longer assigned, then start on the rest (the listener sees every change)."""
        revoked = self.owned - target
        if revoked:
            self.owned = self.owned - revoked
            self.listener.on_stop({(self.settings.topic, p) for p in revoked})
        if target != self.owned:
            self.owned = target
            self.listener.on_start({(self.settings.topic, p) for p in target})

    def step(self) -> None:
        raise NotImplementedError


class ClassicMember(KafkaMember):
    """JoinGroup, SyncGroup and Heartbeat: eager range or cooperative-sticky."""

    def __init__(self, bootstrap: Sequence[str], settings: KafkaMemberSettings, listener, client_id: str):
        super().__init__(bootstrap, settings, listener, client_id)
        self.member_id = ""
        self.generation = -1
        self.must_join = True
        self.cooperative = settings.protocol == COOPERATIVE_STICKY

    def step(self) -> None:
        if self.must_join:
            self._join()
        else:
            gevent.sleep(self.settings.heartbeat_interval_ms / 1000.0)
            self._heartbeat()

    def _rejoin(self, error: int) -> None:
        """Eager: everything is revoked before joining again; cooperative keeps
        what it owns. A member that lost its place loses everything either way."""
        if error in LOST_PLACE or not self.cooperative:
            self.hold(frozenset())
        if error == UNKNOWN_MEMBER_ID:
            self.member_id = ""
        self.must_join = True

    def _join(self) -> None:
        s = self.settings
        metadata = encode_subscription(s.topic, sorted(self.owned) if self.cooperative else ())
        answer = self.connection.call(JoinGroupRequest(
            version=JOIN_GROUP_VERSION, group_id=s.group, session_timeout_ms=s.session_timeout_ms,
            rebalance_timeout_ms=s.rebalance_timeout_ms, member_id=self.member_id, group_instance_id=None,
            protocol_type=PROTOCOL_TYPE, reason=None,
            protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name=s.protocol, metadata=metadata)]),
            JoinGroupResponse)
        if answer.error_code == MEMBER_ID_REQUIRED:
            self.member_id = answer.member_id
            return
        if answer.error_code in COORDINATOR_MOVED:
            raise ConnectionError(f"JoinGroup: error {answer.error_code}")
        if answer.error_code != NONE:
            self._rejoin(answer.error_code)
            gevent.sleep(RETRY_BACKOFF_S)
            return
        self.member_id, self.generation = answer.member_id, answer.generation_id
        assignments = []
        if answer.leader == answer.member_id:
            if self.cooperative:
                plan = cooperative_sticky_assignment({m.member_id: decode_owned(m.metadata)
                                                      for m in answer.members}, s.partitions)
            else:
                plan = range_assignment([m.member_id for m in answer.members], s.partitions)
            assignments = [SyncGroupRequest.SyncGroupRequestAssignment(
                member_id=m, assignment=encode_assignment(s.topic, ps)) for m, ps in plan.items()]
        synced = self.connection.call(SyncGroupRequest(
            version=SYNC_GROUP_VERSION, group_id=s.group, generation_id=self.generation, member_id=self.member_id,
            group_instance_id=None, protocol_type=PROTOCOL_TYPE, protocol_name=answer.protocol_name,
            assignments=assignments), SyncGroupResponse)
        if synced.error_code in COORDINATOR_MOVED:
            raise ConnectionError(f"SyncGroup: error {synced.error_code}")
        if synced.error_code != NONE:
            self._rejoin(synced.error_code)
            return
        target = frozenset(decode_assignment(synced.assignment))
        revoking = bool(self.owned - target)
        self.hold(target)
        # Cooperative: what was revoked goes out in a second round, asked for at once.
        self.must_join = self.cooperative and revoking

    def _heartbeat(self) -> None:
        answer = self.connection.call(HeartbeatRequest(
            version=HEARTBEAT_VERSION, group_id=self.settings.group, generation_id=self.generation,
            member_id=self.member_id, group_instance_id=None), HeartbeatResponse)
        if answer.error_code in COORDINATOR_MOVED:
            raise ConnectionError(f"Heartbeat: error {answer.error_code}")
        if answer.error_code != NONE:
            self._rejoin(answer.error_code)


class ConsumerProtocolMember(KafkaMember):
    """ConsumerGroupHeartbeat (KIP-848): the coordinator assigns, the member reconciles and acknowledges."""

    def __init__(self, bootstrap: Sequence[str], settings: KafkaMemberSettings, listener, client_id: str):
        super().__init__(bootstrap, settings, listener, client_id)
        self.member_id = uuid.uuid4().hex  # KIP-1082: the client names itself
        self.epoch = 0
        self.topic_id = None
        self.interval_s = settings.heartbeat_interval_ms / 1000.0
        self.acknowledge = False  # the owned partitions changed: say so in the next heartbeat, at once

    def step(self) -> None:
        if self.epoch != 0 and not self.acknowledge:
            gevent.sleep(self.interval_s)
        self._heartbeat()

    def _heartbeat(self) -> None:
        s = self.settings
        joining = self.epoch == 0
        Owned = ConsumerGroupHeartbeatRequest.TopicPartitions
        owned = None
        if joining:
            owned = []
        elif self.acknowledge and self.topic_id is not None:
            owned = [Owned(topic_id=self.topic_id, partitions=sorted(self.owned))] if self.owned else []
        answer = self.connection.call(ConsumerGroupHeartbeatRequest(
            version=CONSUMER_GROUP_HEARTBEAT_VERSION, group_id=s.group, member_id=self.member_id,
            member_epoch=self.epoch, instance_id=None, rack_id=None,
            rebalance_timeout_ms=s.rebalance_timeout_ms if joining else -1,
            subscribed_topic_names=[s.topic] if joining else None, subscribed_topic_regex=None,
            server_assignor=None, topic_partitions=owned), ConsumerGroupHeartbeatResponse)
        self.acknowledge = False
        if answer.error_code in COORDINATOR_MOVED:
            raise ConnectionError(f"ConsumerGroupHeartbeat: error {answer.error_code}")
        if answer.error_code in LOST_PLACE:
            self.hold(frozenset())
            self.epoch = 0
            return
        if answer.error_code != NONE:
            raise KafkaMemberError(f"ConsumerGroupHeartbeat: error {answer.error_code} {answer.error_message}")
        self.epoch = answer.member_epoch
        if answer.heartbeat_interval_ms > 0:
            self.interval_s = answer.heartbeat_interval_ms / 1000.0
        if answer.assignment is not None:
            target = set()
            for assigned in answer.assignment.topic_partitions:
                self.topic_id = assigned.topic_id
                target.update(assigned.partitions)
            target = frozenset(target)
            if target != self.owned:
                self.hold(target)
                self.acknowledge = True


def new_member(bootstrap: Sequence[str], settings: KafkaMemberSettings, listener, client_id: str) -> KafkaMember:
    kind = ConsumerProtocolMember if settings.protocol == CONSUMER_PROTOCOL else ClassicMember
    return kind(bootstrap, settings, listener, client_id)


__all__ = ["COOPERATIVE_STICKY", "CONSUMER_PROTOCOL", "EAGER_RANGE", "KafkaConnection", "KafkaMember",
           "KafkaMemberError", "KafkaMemberSettings", "PROTOCOLS", "cooperative_sticky_assignment",
           "find_coordinators", "new_member", "range_assignment"]
