"""The group APIs of the Kafka protocol, bridged into the zkcoord coordinator.

A stock Kafka client that joins a group through this broker becomes an
ordinary member of the zkcoord group: the bridge registers it with the
group's coordinator as a thin consumer would (a :class:`GroupMembership`
per client, under the client's member id), so the coordinator assigns it
with everyone else and pushes Stop and Start to it. What the coordinator
pushes, :class:`~zkcoord.broker.groups.classic.ClassicMember` turns into the
answers the client's JoinGroup, SyncGroup and Heartbeat get; a Stop is
answered only once the client has let the partitions go.

Committed offsets stay where thin consumers keep them: a client's
OffsetCommit is taken for the partitions it holds, reported to the
coordinator on its next Ping (and with every Stop and leave), and written by
the coordinator to ZooKeeper in Kafka 0.8's layout. OffsetFetch answers from
what this broker's members committed, then from what the coordinator handed
out, then from ZooKeeper.

Runs on gevent: each request is served in its connection's greenlet, and a
JoinGroup waits there for its member's registration as Kafka's does.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Optional

import gevent
import gevent.event
from kafka import errors as kafka_errors
from kafka.protocol.admin import DescribeGroupsResponse, ListGroupsResponse
from kafka.protocol.consumer import (
    HeartbeatResponse, JoinGroupResponse, LeaveGroupResponse, OffsetCommitResponse, OffsetDeleteResponse,
    OffsetFetchResponse, SyncGroupResponse,
)
from kafka.protocol.consumer.metadata import (
    ConsumerProtocolAssignment, ConsumerProtocolSubscription, ConsumerProtocolType,
)
from kafka.protocol.metadata import FindCoordinatorResponse

from zkcoord import wire
from zkcoord.broker.groups import classic
from zkcoord.broker.groups.classic import ClassicMember
from zkcoord.broker.groups.fences import BridgeFences, tie_of
from zkcoord.broker.groups import kip848
from zkcoord.broker.groups.kip848 import (
    FENCED_MEMBER_EPOCH, JOIN_EPOCH, LEAVE_EPOCH, STATIC_LEAVE_EPOCH, ConsumerMember,
)
from zkcoord.broker.groups.messages import ConsumerGroupHeartbeatResponse
from zkcoord.consumer.config import MemberConfig
from zkcoord.consumer.membership import GroupMembership
from zkcoord.errors import ConfigError, ZkcoordError
from zkcoord.limits import REFUSED_AUTHORIZATION, abuse_log
from zkcoord.patterns import PatternError, check_pattern
from zkcoord.records import TopicPartition
from zkcoord.security import acl
from zkcoord.security.principal import ANONYMOUS, Principal
from zkcoord.zk import layout
from zkcoord.zk.nodes import read_offsets, read_servers

log = logging.getLogger(__name__)

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

# How long a new member's JoinGroup waits for the coordinator to register it,
# and then for its first Start (a member that gets nothing hears no Start; it
# is answered with an empty assignment, and asked to rejoin if one comes).
REGISTER_WAIT_S = 15.0
FIRST_START_WAIT_S = 3.0
EXPIRY_CHECK_S = 0.25
STALL_S = 1.0
MAX_PENDING_IDS = 10_000
# What a refused registration becomes for the client.
_REFUSALS = {
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
_RESET_REFUSALS = {
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
# How long a commit from outside the group waits for the coordinator to write it.
OUTSIDE_COMMIT_WAIT_S = 15.0
# Kafka's type of every group (ListGroups v5): the one whose members and
# offsets DescribeGroups describes, which is how this broker describes a
# group, whatever protocol its members joined with.
GROUP_TYPE = "classic"
# A group whose stored state cannot be read: Kafka's name for a state not known.
UNKNOWN_STATE = "Unknown"


@dataclass
class _Bridged:
    """One client's member, its registration with the coordinator, and the
    event its waiters (JoinGroup, the Stop being answered) wake on."""

    member: ClassicMember
    group: str
    membership: Optional[GroupMembership] = None
    # Dropped after the client let everything go (its LeaveGroup, or nothing held).
    left: bool = False
    changed: gevent.event.Event = field(default_factory=gevent.event.Event)
    started: gevent.event.Event = field(default_factory=gevent.event.Event)

    def notify(self) -> None:
        self.changed.set()
        self.changed = gevent.event.Event()


class _MemberListener:
    """What the coordinator pushes to a bridged member, carried to its client."""

    def __init__(self, bridged: _Bridged, bridge: "GroupBridge"):
        self.bridged = bridged
        self.bridge = bridge
        self.clock = bridge.clock

    def on_start(self, partitions: dict) -> None:
        self.bridged.member.start(partitions, self.clock())
        self.bridged.started.set()
        self.bridged.notify()

    def on_stop(self, partitions: frozenset) -> dict:
        """Answered once the client has let ``partitions`` go (or had nothing
        left when it went). A client that keeps them past its rebalance
        timeout, or falls silent for its session timeout, is dropped without
        an answer (member.deadline: Kafka's rule): the coordinator sees the
        registration's connection close and fences the partitions until its
        lease has ended, as after a crash, while the client's next heartbeat
        is refused."""
        member = self.bridged.member
        member.stop(partitions, self.clock())
        self.bridged.notify()
        while partitions & member.revoking and not member.gone:
            waiting_on = self.bridged.changed
            waiting_on.wait(timeout=max(0.05, member.deadline() - self.clock()))
            now = self.clock()
            if not self.bridge.judging_silence(now):
                continue
            # Dropped while it still holds what it held (_drop fences that), not after taking it as gone.
            if member.expired(now):
                self.bridge._drop(self.bridged, f"it did not let {sorted(partitions & member.revoking)} go in time")
        if member.gone and not self.bridged.left:
            # Abandoned: the registration's connection is closed already, so
            # this answer never reaches the coordinator, which fences instead.
            return {}
        return {tp: member.committed[tp] for tp in partitions if tp in member.committed}

    def offsets(self) -> dict:
        member = self.bridged.member
        return {tp: o for tp, o in member.committed.items() if tp in member.assignment or tp in member.revoking}

    def last_poll_ms_ago(self) -> int:
        """Since the client was last heard: its requests are its polls (a
        client that stops polling stops heartbeating within its rebalance
        timeout, or leaves; the bridge judges that itself, sooner)."""
        return max(0, int((self.clock() - self.bridged.member.last_heard) * 1000))


class GroupBridge:
    """The group APIs of one broker. ``zk`` is the broker's (gevent) client;
    ``brokers`` returns the live brokers {id: (host, port)}."""

    def __init__(self, broker_id: int, zk, brokers, topic_ids, *, heartbeat_interval_ms: int,
                 session_timeout_ms: int, fence_idle_ms: int, clock=time.monotonic, log_end=None, tls_context=None,
                 authorize=None, credential: Optional[tuple[str, str]] = None, password_without_tls: bool = False,
                 publish_fences=None, lift_fences_elsewhere=None, fenced_anywhere=None):
        """``topic_ids`` returns {topic: Kafka Uuid string} of the topics that
        have one. ``heartbeat_interval_ms`` and ``session_timeout_ms`` are
        those of KIP-848's members, which the broker sets, not the client.
        ``fence_idle_ms``: a gone member's fetch fence lapses once no broker
        has refused its client a fetch for this long (fence_fetched).
        ``log_end(tp)``: the partition's log end offset if this broker leads
        it, else None (the coordinator checks those against their leader).
        ``tls_context``: the client SSLContext its members reach the coordinators
        with (None: plaintext), built once by the broker, as the server's own
        clients build theirs, and shared by every member.
        ``authorize(principal, operation, resource, host)`` decides what a
        client may do (None: everything, the authorizer is off).
        ``credential`` (user, password): the broker's own with the
        coordinators, a super user's, with which it registers each member on
        behalf of the principal its client authenticated as (None: members
        register with no credential); ``password_without_tls``: it may send
        that credential without TLS (SecurityConfig.bridge_password_without_tls).
        ``publish_fences(fences)``: tells every broker the fetch fences this
        bridge's members need now, {(group, member id): FetchFence} (None:
        kept, told to nobody); ``lift_fences_elsewhere(group, tie)``: the
        client of ``tie`` showed here that it let go of what it held in
        ``group``, which lifts the fences other brokers keep for it there;
        ``fenced_anywhere(tie)``: what every broker's fences refuse that
        client now."""
        self.authorize = authorize
        self._credential = credential
        self._password_without_tls = password_without_tls
        self.broker_id = broker_id
        self.zk = zk
        self._brokers = brokers
        self._topic_ids = topic_ids
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.session_timeout_ms = session_timeout_ms
        self.clock = clock
        self._log_end = log_end
        self._tls_context = tls_context
        self._groups: dict[str, dict[str, _Bridged]] = {}
        # Member ids handed out with MEMBER_ID_REQUIRED, oldest first: a
        # client joins with its id at once, so only the latest few are kept.
        self._pending_ids: OrderedDict[tuple[str, str], None] = OrderedDict()
        # Member ids of static members whose instance joined again (as many).
        self._fenced: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._closed = False
        self._fences = BridgeFences(clock)
        self._fence_idle_s = fence_idle_ms / 1000.0
        self._publish_fences = publish_fences or (lambda fences: None)
        self._lift_fences_elsewhere = lift_fences_elsewhere or (lambda group, tie: None)
        self._fenced_anywhere = fenced_anywhere or (lambda tie: frozenset())
        self._last_tick = self._grace_until = clock()
        self._expiry = gevent.spawn(self._expire_loop)

    def close(self) -> None:
        """The broker is stopping: every registration ends (abandoned unless
        its client holds nothing: the clients go on fetching from other brokers)."""
        self._closed = True
        self._expiry.kill(block=False)
        for members in list(self._groups.values()):
            for bridged in list(members.values()):
                self._drop(bridged, "the broker is stopping")

    def _find_own(self, group: str, member_id: str, principal: Principal) -> Optional[_Bridged]:
        """The bridged member ``member_id`` if ``principal`` is the one it joined as:
        another principal's request about it is about an unknown member."""
        bridged = self._find(group, member_id)
        return bridged if bridged is not None and bridged.member.principal == principal else None

    def _allowed(self, principal: Principal, operation: str, resource: acl.Resource, host: str) -> bool:
        if self.authorize is None or self.authorize(principal, operation, resource, host):
            return True
        abuse_log.log(REFUSED_AUTHORIZATION, logging.INFO, "%s: %s", host, acl.refusal(principal, operation, resource))
        return False

    # -- FindCoordinator, ListGroups, DescribeGroups -----------------------------------

    def coordinator_broker(self, group: str) -> Optional[int]:
        """The broker a group's clients are sent to: the one beside the server
        that coordinates the group's slot, else the lowest live broker id (the
        same answer from every broker, so each group is listed by one)."""
        from zkcoord.admin.groups import group_coordinator

        brokers = self._brokers()
        if not brokers:
            return None
        try:
            server = group_coordinator(self.zk, group)[2]
        except ZkcoordError:
            server = None
        if server is not None and server.isdigit() and int(server) in brokers:
            return int(server)
        return min(brokers)

    def find_coordinator(self, request, principal: Principal = ANONYMOUS, client_host: str = ""):
        version = request.API_VERSION
        key_type = getattr(request, "key_type", 0) or 0
        if key_type != 0:
            return FindCoordinatorResponse(
                version=version, throttle_time_ms=0, error_code=COORDINATOR_NOT_AVAILABLE,
                error_message="transactions are not offered", node_id=-1, host="", port=-1)
        if not self._allowed(principal, acl.DESCRIBE, acl.group(request.key), client_host):
            return FindCoordinatorResponse(
                version=version, throttle_time_ms=0, error_code=GROUP_AUTHORIZATION_FAILED,
                error_message=acl.refusal(principal, acl.DESCRIBE, acl.group(request.key)), node_id=-1, host="",
                port=-1)
        node = self.coordinator_broker(request.key)
        if node is None:
            return FindCoordinatorResponse(
                version=version, throttle_time_ms=0, error_code=COORDINATOR_NOT_AVAILABLE,
                error_message="no broker is registered", node_id=-1, host="", port=-1)
        host, port = self._brokers()[node]
        return FindCoordinatorResponse(version=version, throttle_time_ms=0, error_code=NONE, error_message=None,
                                       node_id=node, host=host, port=port)

    def list_groups(self, request, principal: Principal = ANONYMOUS, client_host: str = ""):
        from zkcoord.admin.groups import list_groups

        wanted = {s.lower() for s in (getattr(request, "states_filter", None) or [])}
        types = {t.lower() for t in (getattr(request, "types_filter", None) or [])}
        if types and GROUP_TYPE not in types:
            return ListGroupsResponse(version=request.API_VERSION, throttle_time_ms=0, error_code=NONE, groups=[])
        # As Kafka: Describe on the cluster lists every group; else those one may Describe.
        every = self.authorize is None or self.authorize(principal, acl.DESCRIBE, acl.cluster(), client_host)
        listed = []
        for group in list_groups(self.zk):
            if self.coordinator_broker(group) != self.broker_id:
                continue  # another broker lists it: admin clients ask every broker
            if not every and not self.authorize(principal, acl.DESCRIBE, acl.group(group), client_host):
                continue  # as Kafka: a group one may not describe is not listed
            state = self._state_of(group)[0]
            if wanted and state.lower() not in wanted:
                continue
            listed.append(ListGroupsResponse.ListedGroup(group_id=group, protocol_type=ConsumerProtocolType,
                                                         group_state=state, group_type=GROUP_TYPE))
        return ListGroupsResponse(version=request.API_VERSION, throttle_time_ms=0, error_code=NONE, groups=listed)

    def _state_of(self, group: str):
        """Kafka's name for the group's state (as `zkcoord groups describe`
        names it), and the coordinator's persisted state (None: never written)."""
        from zkcoord.admin.groups import group_state

        try:
            return group_state(self.zk, group)
        except ZkcoordError as exc:
            log.warning("group %s: unreadable stored state: %s", group, exc)
            return UNKNOWN_STATE, None

    def describe_groups(self, request, principal: Principal = ANONYMOUS, client_host: str = ""):
        from zkcoord.admin.groups import DEAD, list_groups

        Group = DescribeGroupsResponse.DescribedGroup
        Member = Group.DescribedGroupMember
        known = set(list_groups(self.zk))
        described = []
        for group in request.groups:
            if not self._allowed(principal, acl.DESCRIBE, acl.group(group), client_host):
                described.append(Group(error_code=GROUP_AUTHORIZATION_FAILED, error_message=None, group_id=group,
                                       group_state="", protocol_type="", protocol_data="", members=[]))
                continue
            if group not in known:
                described.append(Group(error_code=NONE, error_message=None, group_id=group, group_state=DEAD,
                                       protocol_type="", protocol_data="", members=[]))
                continue
            state_name, state = self._state_of(group)
            local = {registration_id(b.member): b for b in self._groups.get(group, {}).values()}
            clients = dict(state.clients) if state else {}
            members = []
            for member_id, pairs in sorted((state.assignment if state else {}).items()):
                bridged = local.get(member_id)
                # A member this broker does not bridge: as its coordinator recorded it.
                recorded = clients.get(member_id) or layout.MemberClient("")
                partitions = frozenset(TopicPartition(t, p) for t, p in pairs)
                members.append(Member(
                    member_id=member_id,
                    group_instance_id=bridged.member.instance_id if bridged else None,
                    client_id=bridged.member.client_id if bridged else recorded.client_id or "zkcoord",
                    # Kafka names a client's host as Java prints an address: "/127.0.0.1".
                    client_host=_as_kafka_host(bridged.member.client_host if bridged else recorded.host),
                    member_metadata=bridged.member.subscription if bridged else _subscription_bytes(partitions),
                    member_assignment=_assignment_bytes(partitions, 0)))
            described.append(Group(error_code=NONE, error_message=None, group_id=group, group_state=state_name,
                                   protocol_type=ConsumerProtocolType,
                                   protocol_data=state.strategy if state and state.assignment else "",
                                   members=members))
        return DescribeGroupsResponse(version=request.API_VERSION, throttle_time_ms=0, groups=described)

    # -- JoinGroup, SyncGroup, Heartbeat, LeaveGroup -------------------------------------

    def join_group(self, request, client_host: str, principal: Principal = ANONYMOUS):
        version = request.API_VERSION
        instance_id = getattr(request, "group_instance_id", None)

        def answer(error: int, member_id: str = "", member: Optional[ClassicMember] = None):
            return JoinGroupResponse(
                version=version, throttle_time_ms=0, error_code=error,
                generation_id=member.generation if member else -1, protocol_type=ConsumerProtocolType,
                protocol_name=member.protocol_name if member else None,
                leader=classic.COORDINATOR_LEADS if member else "", skip_assignment=False,
                member_id=member_id, members=[])

        if not request.group_id:
            return answer(INVALID_GROUP_ID)
        try:
            layout.group_path(request.group_id)
        except layout.LayoutError:
            return answer(INVALID_GROUP_ID)
        if not self._allowed(principal, acl.READ, acl.group(request.group_id), client_host):
            return answer(GROUP_AUTHORIZATION_FAILED)
        if request.protocol_type != ConsumerProtocolType:
            return answer(INCONSISTENT_GROUP_PROTOCOL)
        offered = {p.name: p.metadata for p in request.protocols}
        try:
            protocol_name = classic.choose_protocol(list(offered))
            subscription = ConsumerProtocolSubscription.decode(bytes(offered[protocol_name]))
        except classic.UnsupportedProtocols as exc:
            log.info("group %s: refusing a member: %s", request.group_id, exc)
            return answer(INCONSISTENT_GROUP_PROTOCOL)
        except Exception as exc:  # the library raises many types on bad bytes
            log.info("group %s: undecodable subscription: %r", request.group_id, exc)
            return answer(INCONSISTENT_GROUP_PROTOCOL)
        topics = tuple(sorted(set(subscription.topics or ())))
        owned = None
        if getattr(subscription, "owned_partitions", None) is not None and subscription.version >= 1:
            owned = frozenset(TopicPartition(t.topic, p) for t in subscription.owned_partitions
                              for p in t.partitions)
        members = self._groups.get(request.group_id, {})
        member_id = request.member_id
        bridged = self._find_own(request.group_id, member_id, principal) if member_id else None
        if member_id and bridged is None and self._taken(request.group_id, member_id):
            # Member ids are no secret (DescribeGroups lists them): another
            # principal's join under one is about an unknown member, and
            # never takes the place of the live one.
            return answer(classic.UNKNOWN_MEMBER_ID, member_id)
        now = self.clock()
        if bridged is not None and not bridged.member.gone:
            # A member joining again: after a rebalance was asked for, or of its own accord.
            member = bridged.member
            if topics != member.topics or protocol_name != member.protocol_name:
                member.join(owned, now)  # what it says it still owns: an eager client, nothing
                self._drop(bridged, "its subscription changed")
                bridged = None
            else:
                member.subscription = bytes(offered[protocol_name])
                member.join(owned, now)
                bridged.notify()
                self._refence(bridged)
                if not owned:  # it let go of everything it held anywhere
                    self._lift_fences_elsewhere(request.group_id, tie_of(member))
                return answer(NONE, member_id, member)
        if member_id and bridged is None and (request.group_id, member_id) not in self._pending_ids \
                and member_id not in members:
            return answer(self._unknown(request.group_id, member_id), member_id)
        if not member_id:
            member_id = f"{request.header.client_id or 'client'}-{uuid.uuid4()}"
            if version >= 4 and instance_id is None:
                # KIP-394: the client learns its id first and joins with it.
                self._pending_ids[(request.group_id, member_id)] = None
                while len(self._pending_ids) > MAX_PENDING_IDS:
                    self._pending_ids.popitem(last=False)
                return answer(MEMBER_ID_REQUIRED, member_id)
        self._pending_ids.pop((request.group_id, member_id), None)
        if instance_id is not None:
            if self._held_by_other(members, instance_id, principal, request.group_id):
                return answer(FENCED_INSTANCE_ID, member_id)
            for other in list(members.values()):
                if other.member.instance_id == instance_id and not other.member.gone:
                    self._replaced(other, member_id)
        member = ClassicMember(
            member_id=member_id, protocol_name=protocol_name, topics=topics,
            session_timeout_ms=request.session_timeout_ms,
            rebalance_timeout_ms=getattr(request, "rebalance_timeout_ms", -1) if version >= 1
            else request.session_timeout_ms,
            instance_id=instance_id, client_id=request.header.client_id or "", client_host=client_host,
            last_heard=now, subscription=bytes(offered[protocol_name]), principal=principal)
        if member.rebalance_timeout_ms <= 0:
            member.rebalance_timeout_ms = member.session_timeout_ms
        bridged = self._add(member, request.group_id)
        error = self._register(bridged, classic.strategies_for(list(offered)))
        if error != NONE:
            self._drop(bridged, "its registration was refused")
            return answer(error, member_id)
        bridged.started.wait(timeout=FIRST_START_WAIT_S)
        member.join(owned, self.clock())
        # A client joining afresh lost any member it had: it owns what it says, at most.
        self._fences_changed(self._fences.joined(request.group_id, member_id, tie_of(member), owned))
        if not owned:  # it let go of everything it held anywhere
            self._lift_fences_elsewhere(request.group_id, tie_of(member))
        return answer(NONE, member_id, member)

    def _register(self, bridged: _Bridged, strategies: tuple[str, ...]) -> int:
        """Register the member with its coordinator; the error for its client."""
        member = bridged.member
        if not member.topics and not member.pattern:
            return NONE  # subscribed to nothing yet: a member that gets nothing, without a registration
        try:
            servers = read_servers(self.zk)
        except ZkcoordError as exc:
            log.warning("group %s: cannot read the servers: %s", bridged.group, exc)
            return COORDINATOR_NOT_AVAILABLE
        if not servers:
            return COORDINATOR_NOT_AVAILABLE
        try:
            config = MemberConfig(
                group=bridged.group, topics=member.topics, pattern=member.pattern,
                consumer_id=registration_id(member) if member.instance_id else None,
                session_timeout_ms=member.session_timeout_ms,
                max_poll_interval_ms=max(member.rebalance_timeout_ms, 1), auto_commit=True,
                assignment_strategies=strategies, **self._on_behalf_of(member.principal))
        except ConfigError as exc:
            log.info("group %s: member %s cannot register: %s", bridged.group, member.member_id, exc)
            return INVALID_REQUEST
        membership = GroupMembership([f"{s.host}:{s.port}" for s in servers.values()], config,
                                     _MemberListener(bridged, self), dynamic_id=registration_id(member),
                                     tls_context=self._tls_context)
        bridged.membership = membership
        membership.start()
        deadline = self.clock() + min(REGISTER_WAIT_S, member.rebalance_timeout_ms / 1000.0)
        while not membership.registered.wait(timeout=0.05):
            if membership.error is not None or self.clock() >= deadline or self._closed:
                refusal = membership.error
                membership.close(timeout=1)
                bridged.membership = None
                if isinstance(refusal, wire.WireError):
                    log.info("group %s: member %s refused: %s", bridged.group, member.member_id, refusal)
                    return _REFUSALS.get(refusal.code, UNKNOWN_SERVER_ERROR)
                log.info("group %s: no coordinator registered member %s in time", bridged.group,
                         member.member_id)
                return COORDINATOR_NOT_AVAILABLE
        if self._closed:  # the broker stopped while this registration went on
            membership.close(timeout=1)
            bridged.membership = None
            return COORDINATOR_NOT_AVAILABLE
        return NONE

    @staticmethod
    def _held_by_other(members, instance_id: str, principal: Principal, group: str) -> bool:
        """Whether another principal's live member holds the static ``instance_id``."""
        for other in members.values():
            if other.member.instance_id == instance_id and not other.member.gone \
                    and other.member.principal != principal:
                log.info("group %s: static member %s is held by %s; %s may not take it over", group,
                         instance_id, other.member.principal, principal)
                return True
        return False

    def _on_behalf_of(self, principal: Principal) -> dict:
        if self._credential is None:
            # With the authorizer on and no credential, the server's client
            # certificate is its credential (the configuration demands one or
            # the other): the coordinator must still judge the client's principal.
            return {"on_behalf_of": str(principal)} if self.authorize is not None else {}
        user, password = self._credential
        # Always named, ANONYMOUS too: the broker's own rights are never a client's.
        return {"user": user, "password": password, "on_behalf_of": str(principal),
                "password_without_tls": self._password_without_tls}

    def _replaced(self, old: _Bridged, member_id: str) -> None:
        """A static member's instance joined again under a new member id: the
        old id is fenced, so its process, if alive, cannot take the place back."""
        self._fenced[(old.group, old.member.member_id)] = None
        while len(self._fenced) > MAX_PENDING_IDS:
            self._fenced.popitem(last=False)
        self._drop(old, f"instance {old.member.instance_id} joined again as {member_id}")

    def _unknown(self, group: str, member_id: str) -> int:
        """The error for a request from a member id not in the group."""
        return FENCED_INSTANCE_ID if (group, member_id) in self._fenced else classic.UNKNOWN_MEMBER_ID

    def _taken(self, group: str, member_id: str) -> bool:
        """Whether a live member of ``group`` holds ``member_id``."""
        other = self._find(group, member_id)
        return other is not None and not other.member.gone

    def _add(self, member, group: str) -> _Bridged:
        if self._taken(group, member.member_id):
            # Replacing it would orphan its registration, still answering its
            # coordinator's pings and holding its partitions for nobody.
            raise ZkcoordError(f"member {member.member_id} of group {group} is live; it is not replaced")
        bridged = _Bridged(member, group)
        self._groups.setdefault(group, {})[member.member_id] = bridged
        return bridged

    def _find(self, group: str, member_id: str) -> Optional[_Bridged]:
        return self._groups.get(group, {}).get(member_id)

    def sync_group(self, request, principal: Principal = ANONYMOUS, client_host: str = ""):
        version = request.API_VERSION
        bridged = self._find_own(request.group_id, request.member_id, principal)

        def answer(error: int, assignment: bytes = b""):
            member = bridged.member if bridged else None
            return SyncGroupResponse(version=version, throttle_time_ms=0, error_code=error,
                                     protocol_type=ConsumerProtocolType if member else None,
                                     protocol_name=member.protocol_name if member else None,
                                     assignment=assignment)

        if not self._allowed(principal, acl.READ, acl.group(request.group_id), client_host):
            return answer(GROUP_AUTHORIZATION_FAILED)
        if bridged is None:
            return answer(self._unknown(request.group_id, request.member_id))
        error, given = bridged.member.sync(request.generation_id, self.clock())
        bridged.notify()
        if error != NONE:
            return answer(error)
        self._granted(bridged, given)
        return answer(NONE, _assignment_bytes(given, 1 if bridged.member.cooperative else 0))

    def heartbeat(self, request, principal: Principal = ANONYMOUS, client_host: str = ""):
        bridged = self._find_own(request.group_id, request.member_id, principal)
        if not self._allowed(principal, acl.READ, acl.group(request.group_id), client_host):
            error = GROUP_AUTHORIZATION_FAILED
        elif bridged is None:
            error = self._unknown(request.group_id, request.member_id)
        else:
            error = bridged.member.heartbeat(request.generation_id, self.clock())
        return HeartbeatResponse(version=request.API_VERSION, throttle_time_ms=0, error_code=error)

    def leave_group(self, request, principal: Principal = ANONYMOUS, client_host: str = ""):
        version = request.API_VERSION
        if version < 3:
            identities = [(request.member_id, None)]
        else:
            identities = [(m.member_id, m.group_instance_id) for m in request.members]
        if not self._allowed(principal, acl.READ, acl.group(request.group_id), client_host):
            return LeaveGroupResponse(version=version, throttle_time_ms=0, error_code=GROUP_AUTHORIZATION_FAILED,
                                      members=[LeaveGroupResponse.MemberResponse(
                                          member_id=m, group_instance_id=i, error_code=GROUP_AUTHORIZATION_FAILED)
                                          for m, i in identities])
        results = []
        for member_id, instance_id in identities:
            bridged = self._find_own(request.group_id, member_id, principal)
            if bridged is None and instance_id is not None:
                # Only the principal that holds a static id may make it leave.
                bridged = next((b for b in self._groups.get(request.group_id, {}).values()
                                if b.member.instance_id == instance_id and b.member.principal == principal), None)
                if bridged is not None and member_id:
                    # The instance's former process: the current one stays.
                    results.append(LeaveGroupResponse.MemberResponse(
                        member_id=member_id, group_instance_id=instance_id, error_code=FENCED_INSTANCE_ID))
                    continue
            error = self._unknown(request.group_id, member_id) if bridged is None else NONE
            if bridged is not None:
                self._drop(bridged, "it left", left=True)
            results.append(LeaveGroupResponse.MemberResponse(member_id=member_id, group_instance_id=instance_id,
                                                             error_code=error))
        top = results[0].error_code if version < 3 else NONE
        return LeaveGroupResponse(version=version, throttle_time_ms=0, error_code=top, members=results)

    def _drop(self, bridged: _Bridged, why: str, left: bool = False) -> None:
        """The member is gone; its requests are refused from now on. If the
        client has let everything go (``left``: its LeaveGroup, or it holds
        nothing), its registration leaves with the offsets it committed;
        otherwise it is abandoned, and the coordinator fences what it may
        still fetch until the registration's lease has ended."""
        member = bridged.member
        if not member.gone:
            bridged.left = left or not member.holding
            # Abandoned, the client may go on fetching what it holds, past the
            # registration's lease: its fetches of them are refused until it
            # shows it let go (fences.py).
            if not self._closed:
                self._fences_changed(self._fences.set(bridged.group, member.member_id, tie_of(member),
                                                      () if bridged.left else member.holding))
        member.leave()
        bridged.notify()
        members = self._groups.get(bridged.group, {})
        if members.get(member.member_id) is bridged:
            del members[member.member_id]
            log.info("member %s of group %s is gone: %s", member.member_id, bridged.group, why)
        if not members:
            self._groups.pop(bridged.group, None)
        membership, bridged.membership = bridged.membership, None
        if membership is not None:
            if bridged.left:
                gevent.spawn(membership.close)
            else:
                membership.abandon()

    # -- fetch fences (fences.py) ----------------------------------------------------------

    def _refence(self, bridged: _Bridged) -> None:
        """A live member is fenced on what its client holds while its
        registration's lease is in doubt (the client is being asked to let
        it all go), and on nothing otherwise."""
        member = bridged.member
        if member.gone or self._closed:
            return  # a gone member's fence was set when it went, and only narrows (joined, granted)
        self._fences_changed(self._fences.set(bridged.group, member.member_id, tie_of(member),
                                              member.holding if member.suspended else ()))

    def _granted(self, bridged: _Bridged, partitions) -> None:
        member = bridged.member
        self._fences_changed(self._fences.granted(bridged.group, member.member_id, tie_of(member), partitions))
        if partitions:
            self._lift_fences_elsewhere(bridged.group, tie_of(member))

    def _fences_changed(self, changed: bool) -> None:
        if changed:
            self._publish_fences(self._fences.fences())

    def _unfence_owner(self, bridged: _Bridged) -> None:
        """A client this bridge serves, its lease not in doubt, refused a
        partition it holds: the fence is another broker's, kept for an old
        member of the same client that let go (its lift was missed, undone
        or written after the client joined here). Ask again: refusing the
        owner would keep the partition from everyone."""
        member = bridged.member
        if not member.suspended and member.holding and self._fenced_anywhere(tie_of(member)) & member.holding:
            self._lift_fences_elsewhere(bridged.group, tie_of(member))

    def fence_lifted(self, key: tuple[str, str]) -> None:
        """Another broker lifted the fence of member ``key`` (group, member
        id), whose client let go there: it is not to be written again."""
        self._fences.lift(*key)

    def fence_fetched(self, key: tuple[str, str]) -> None:
        """A broker refused the client of member ``key`` (group, member id) a fetch lately."""
        self._fences.fetched(*key)

    def _lapse_idle_fences(self) -> None:
        """A gone member whose client no broker has refused a fetch for the
        idle time has stopped (or stays away from every broker): its fence
        lapses. A live member's fence follows its lease (_refence)."""
        changed = False
        for group, member_id in self._fences.idle(self._fence_idle_s):
            if self._find(group, member_id) is None:
                log.info("member %s of group %s: no fetch of its client refused for %.0fs: its fetch fence lapses",
                         member_id, group, self._fence_idle_s)
                changed |= self._fences.lift(group, member_id)
        self._fences_changed(changed)

    def judging_silence(self, now: float) -> bool:
        """May a client's silence be held against it now? Not just after this
        process was stalled (paused, starved): the clients' requests then wait
        unread in their sockets, so silence proves nothing yet."""
        if now - self._last_tick > STALL_S:
            self._grace_until = now + STALL_S
        self._last_tick = now
        return now >= self._grace_until

    def _expire_loop(self) -> None:
        while True:
            gevent.sleep(EXPIRY_CHECK_S)
            self._expire(self.clock())

    def _expire(self, now: float) -> None:
        """Drop the members gone silent; watch the others' leases; lift the fences gone idle."""
        self._lapse_idle_fences()
        judging = self.judging_silence(now)
        for members in list(self._groups.values()):
            for bridged in list(members.values()):
                if bridged.member.gone or (judging and bridged.member.expired(now)):
                    self._drop(bridged, "it did not answer in time")  # fenced on what its client held
                elif bridged.membership is not None and bridged.membership.closed is False \
                        and bridged.membership.error is not None:
                    self._drop(bridged, f"its registration failed: {bridged.membership.error}")
                elif bridged.membership is not None:
                    self._watch_lease(bridged, now)
                    self._unfence_owner(bridged)

    def _watch_lease(self, bridged: _Bridged, now: float) -> None:
        """A thin consumer stops when its lease runs out; a stock client needs
        time to be told and to let go. So once the registration's lease is
        within the client's warning of its end (member.lease_warning_s: its
        heartbeat interval and a second to let go), the client is asked to
        give everything up, and its fetches of what it holds are refused;
        once a request renews the lease, it gets its partitions back."""
        membership = bridged.membership
        member = bridged.member
        if not membership.registered.is_set():
            at_risk = bool(member.holding)
        else:
            at_risk = member.lease_at_risk(membership.protocol.lease_deadline - membership.clock())
        if at_risk != member.suspended:
            log.info("member %s of group %s: %s", member.member_id, bridged.group,
                     "its registration's lease is running out: the client is to let everything go" if at_risk
                     else "its registration's lease is renewed")
            member.suspend(at_risk, now)
            bridged.notify()
        self._refence(bridged)

    # -- ConsumerGroupHeartbeat (KIP-848) -------------------------------------------------

    def consumer_group_heartbeat(self, request, client_host: str, principal: Principal = ANONYMOUS):
        version = request.API_VERSION
        epoch = request.member_epoch

        def answer(error: int, member: Optional[ConsumerMember] = None, assignment=None,
                   message: Optional[str] = None, member_epoch: Optional[int] = None):
            Assignment = ConsumerGroupHeartbeatResponse.Assignment
            ids = self._topic_ids()
            sent = None if assignment is None else Assignment(topic_partitions=[
                Assignment.TopicPartitions(topic_id=layout.parse_kafka_uuid(ids[t]), partitions=ps)
                for t, ps in _by_topic(assignment).items() if t in ids])
            return ConsumerGroupHeartbeatResponse(
                version=version, throttle_time_ms=0, error_code=error, error_message=message,
                member_id=member.member_id if member else (request.member_id or None),
                member_epoch=member.generation if member else (epoch if member_epoch is None else member_epoch),
                heartbeat_interval_ms=self.heartbeat_interval_ms, assignment=sent)

        try:
            layout.group_path(request.group_id)
        except layout.LayoutError as exc:
            return answer(INVALID_GROUP_ID, message=str(exc))
        if not self._allowed(principal, acl.READ, acl.group(request.group_id), client_host):
            return answer(GROUP_AUTHORIZATION_FAILED, message=acl.refusal(principal, acl.READ,
                                                                          acl.group(request.group_id)))
        bridged = self._find_own(request.group_id, request.member_id, principal) if request.member_id else None
        if bridged is not None and not isinstance(bridged.member, ConsumerMember):
            return answer(classic.UNKNOWN_MEMBER_ID, message="this member id speaks the classic protocol")
        now = self.clock()
        if epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            if bridged is not None:
                self._drop(bridged, "it left", left=True)
            return answer(NONE, member_epoch=epoch)
        # Each is None when unchanged since the client's last heartbeat.
        topics = None if request.subscribed_topic_names is None else \
            tuple(sorted(set(request.subscribed_topic_names)))
        pattern = getattr(request, "subscribed_topic_regex", None)
        if pattern:
            try:  # RE2's syntax, as Kafka's own KIP-848 coordinator takes it (RE2/J)
                check_pattern(pattern)
            except PatternError as exc:
                return answer(INVALID_REQUEST, message=str(exc))
        try:
            strategies = kip848.strategies_for(request.server_assignor)
        except kip848.UnsupportedAssignor as exc:
            log.info("group %s: refusing member %s: %s", request.group_id, request.member_id or "(new)", exc)
            return answer(kip848.UNSUPPORTED_ASSIGNOR, message=str(exc))
        if bridged is not None and ((topics is not None and topics != bridged.member.topics)
                                    or (pattern is not None and (pattern or None) != bridged.member.pattern)):
            # A new subscription is a new registration: the client joins again.
            self._drop(bridged, "its subscription changed")
            return answer(FENCED_MEMBER_EPOCH, message="the subscription changed: join again")
        if bridged is None:
            if epoch != JOIN_EPOCH:
                return answer(self._unknown(request.group_id, request.member_id),
                              message="unknown member: join with epoch 0")
            if request.member_id and self._taken(request.group_id, request.member_id):
                # KIP-848 clients choose their own ids: one another
                # principal's live member holds is never taken from it.
                return answer(classic.UNKNOWN_MEMBER_ID, message="another client's member holds this member id")
            if not topics and not pattern:
                return answer(INVALID_REQUEST, message="a joining member must name its topics or a regex")
            bridged = self._join_consumer_member(request, topics or (), pattern or None, strategies, client_host, now,
                                                 principal)
            if bridged == kip848.UNRELEASED_INSTANCE_ID:
                return answer(bridged, message=f"instance id {request.instance_id} is held by a member that has "
                                               "not left the group")
            if isinstance(bridged, int):
                return answer(bridged, message="the coordinator refused the member; see the broker's log")
        member = bridged.member
        ids = self._topic_ids()
        owned = None
        if request.topic_partitions is not None:
            names = {layout.parse_kafka_uuid(i): t for t, i in ids.items()}
            # A topic id we cannot name (not cached yet, or deleted) leaves the
            # report unread: what it held is not released on a guess.
            if all(tp.topic_id in names for tp in request.topic_partitions):
                owned = frozenset(TopicPartition(names[tp.topic_id], p) for tp in request.topic_partitions
                                  for p in tp.partitions)
        error, assignment = member.heartbeat(epoch, owned, now, sendable=lambda tp: tp[0] in ids)
        bridged.notify()
        if epoch == JOIN_EPOCH:
            # At epoch 0 a client owns nothing: whatever member it had, it let go.
            self._fences_changed(self._fences.joined(bridged.group, member.member_id, tie_of(member)))
        if assignment:
            self._granted(bridged, assignment)
        self._refence(bridged)
        return answer(error, member, assignment)

    def _join_consumer_member(self, request, topics, pattern: Optional[str], strategies: tuple[str, ...],
                              client_host: str, now: float, principal: Principal = ANONYMOUS):
        """A new KIP-848 member, registered with its coordinator; or the error for its client."""
        member_id = request.member_id or str(uuid.uuid4())
        if request.instance_id is not None and self._held_by_other(self._groups.get(request.group_id, {}),
                                                                   request.instance_id, principal, request.group_id):
            return FENCED_INSTANCE_ID
        if request.instance_id is not None:
            for other in list(self._groups.get(request.group_id, {}).values()):
                if other.member.instance_id != request.instance_id or other.member.gone:
                    continue
                if kip848.keeps_instance_id(other.member):
                    log.info("group %s: static member %s with instance id %s cannot join: member %s holds the "
                             "instance id and has not left", request.group_id, member_id, request.instance_id,
                             other.member.member_id)
                    return kip848.UNRELEASED_INSTANCE_ID
                self._replaced(other, member_id)
        member = ConsumerMember(
            member_id=member_id, topics=topics, pattern=pattern, session_timeout_ms=self.session_timeout_ms,
            rebalance_timeout_ms=request.rebalance_timeout_ms if request.rebalance_timeout_ms > 0
            else self.session_timeout_ms,
            instance_id=request.instance_id, client_id=request.header.client_id or "", client_host=client_host,
            last_heard=now, principal=principal, heartbeat_interval_s=self.heartbeat_interval_ms / 1000.0)
        bridged = self._add(member, request.group_id)
        error = self._register(bridged, strategies)
        if error != NONE:
            self._drop(bridged, "its registration was refused")
            return error
        return bridged

    # -- OffsetCommit, OffsetFetch -----------------------------------------------------

    def offset_commit(self, request, principal: Principal = ANONYMOUS, client_host: str = ""):
        Topic = OffsetCommitResponse.OffsetCommitResponseTopic
        Partition = Topic.OffsetCommitResponsePartition
        group_allowed = self._allowed(principal, acl.READ, acl.group(request.group_id), client_host)
        generation = getattr(request, "generation_id_or_member_epoch", -1)
        member_id = getattr(request, "member_id", "")
        bridged = self._find_own(request.group_id, member_id, principal) if member_id else None
        # Kafka's commit from outside the group (an admin client's
        # alterConsumerGroupOffsets, kafka-consumer-groups --reset-offsets):
        # no member id and no generation.
        from_admin = member_id == "" and generation < 0
        now = self.clock()
        errors: dict[TopicPartition, int] = {}
        outside: dict[TopicPartition, int] = {}
        for topic in request.topics:
            for part in topic.partitions:
                tp = TopicPartition(topic.name, part.partition_index)
                if not group_allowed:
                    errors[tp] = GROUP_AUTHORIZATION_FAILED
                elif not self._allowed(principal, acl.READ, acl.topic(topic.name), client_host):
                    errors[tp] = TOPIC_AUTHORIZATION_FAILED
                elif bridged is None and from_admin:
                    outside[tp] = part.committed_offset
                elif bridged is None:
                    # No member: offsets of a group move only through its
                    # coordinator (its members' commits, or an admin reset).
                    errors[tp] = self._unknown(request.group_id, member_id)
                else:
                    error = bridged.member.commit_error(generation, tp, now)
                    if error == NONE and part.committed_offset >= 0:
                        error = self._within_log(request.group_id, member_id, tp, part.committed_offset)
                    if error == NONE and part.committed_offset >= 0:
                        bridged.member.commit(tp, part.committed_offset)
                    errors[tp] = error
        if outside:
            error = self._commit_from_outside(request.group_id, outside)
            errors.update((tp, error) for tp in outside)
        topics = [Topic(name=topic.name, partitions=[
            Partition(partition_index=part.partition_index,
                      error_code=errors[TopicPartition(topic.name, part.partition_index)])
            for part in topic.partitions]) for topic in request.topics]
        if bridged is None and member_id == "" and not from_admin:
            log.info("group %s: refused a commit from outside the group (no member id)", request.group_id)
        return OffsetCommitResponse(version=request.API_VERSION, throttle_time_ms=0, topics=topics)

    def _commit_from_outside(self, group: str, offsets: dict[TopicPartition, int]) -> int:
        """Commit ``offsets`` for a client outside the group: as an offset
        reset, through the group's coordinator, which holds the offsets not
        yet written and refuses while the group has members (Kafka accepts
        such a commit only for an empty group too). One Kafka error code for
        every partition: the reset is whole or nothing."""
        from zkcoord.admin.groups import group_coordinator
        from zkcoord.admin.reset import send_reset

        try:
            server = group_coordinator(self.zk, group)[2]
            endpoint = read_servers(self.zk).get(server) if server is not None else None
        except ZkcoordError as exc:
            log.warning("group %s: cannot find its coordinator: %s", group, exc)
            endpoint = None
        if endpoint is None:
            return COORDINATOR_NOT_AVAILABLE
        user, password = self._credential or ("", "")
        if password and self._tls_context is None and not self._password_without_tls:
            log.warning("group %s: a commit from outside the group needs the broker's credential sent to the "
                        "coordinator, which is not allowed without TLS", group)
            return COORDINATOR_NOT_AVAILABLE
        request = wire.ResetOffsetsRequest(
            group_id=group, execute=True, force=False, user=user, password=password,
            offsets=tuple(wire.TopicPartitionOffset(t, p, o) for (t, p), o in sorted(offsets.items())))
        try:
            answer = send_reset((endpoint.host, endpoint.port), request, self._tls_context, OUTSIDE_COMMIT_WAIT_S)
        except (ZkcoordError, OSError) as exc:
            log.info("group %s: the coordinator did not take a commit from outside the group: %s", group, exc)
            return COORDINATOR_NOT_AVAILABLE
        error = _RESET_REFUSALS.get(answer.error_code, UNKNOWN_SERVER_ERROR)
        log.info("group %s: commit from outside the group of %s: %s", group,
                 ", ".join(f"{t}-{p} at {o}" for (t, p), o in sorted(offsets.items())),
                 "done" if error == NONE else f"refused ({answer.error_message})")
        return error

    def _within_log(self, group: str, member_id: str, tp: TopicPartition, offset: int) -> int:
        """OFFSET_OUT_OF_RANGE for an offset beyond the partition's log end
        (committing it would make the group skip records not yet written)."""
        end = self._log_end(tp) if self._log_end is not None else None
        if end is not None and offset > end:
            log.info("group %s: member %s committed offset %d for %s-%d, beyond the log end %d; refused",
                     group, member_id, offset, tp[0], tp[1], end)
            return OFFSET_OUT_OF_RANGE
        return NONE

    def offset_fetch(self, request, principal: Principal = ANONYMOUS, client_host: str = ""):
        Topic = OffsetFetchResponse.OffsetFetchResponseTopic
        Partition = Topic.OffsetFetchResponsePartition
        group = request.group_id
        if not self._allowed(principal, acl.DESCRIBE, acl.group(group), client_host):
            refused = [Topic(name=t.name, partitions=[
                Partition(partition_index=p, committed_offset=-1, committed_leader_epoch=-1, metadata="",
                          error_code=GROUP_AUTHORIZATION_FAILED) for p in t.partition_indexes])
                for t in request.topics or ()]
            return OffsetFetchResponse(version=request.API_VERSION, throttle_time_ms=0, topics=refused,
                                       error_code=GROUP_AUTHORIZATION_FAILED)
        try:
            layout.group_path(group)
            stored = read_offsets(self.zk, group)
        except (layout.LayoutError, ZkcoordError) as exc:
            log.info("group %s: offsets not readable: %s", group, exc)
            return OffsetFetchResponse(version=request.API_VERSION, throttle_time_ms=0, topics=[],
                                       error_code=INVALID_GROUP_ID if isinstance(exc, layout.LayoutError)
                                       else COORDINATOR_NOT_AVAILABLE)
        known = dict(stored)
        for bridged in self._groups.get(group, {}).values():
            member = bridged.member
            for tp, start in member.assignment.items():
                offset = member.committed.get(tp, start)
                if offset >= 0:
                    known[tp] = offset
        if request.topics is None:
            wanted: dict[str, list[int]] = {}
            for topic, partition in sorted(known):
                wanted.setdefault(topic, []).append(partition)
        else:
            wanted = {t.name: list(t.partition_indexes) for t in request.topics}
        topics = [Topic(name=name, partitions=[
            Partition(partition_index=p, committed_offset=known.get(TopicPartition(name, p), -1),
                      committed_leader_epoch=-1, metadata="", error_code=NONE) for p in partitions])
            for name, partitions in wanted.items()]
        return OffsetFetchResponse(version=request.API_VERSION, throttle_time_ms=0, topics=topics, error_code=NONE)

    def offset_delete(self, request, principal: Principal = ANONYMOUS, client_host: str = ""):
        """Kafka's OffsetDelete, with Kafka's refusals: a group that does not
        exist (GROUP_ID_NOT_FOUND), a topic the group's members consume
        (GROUP_SUBSCRIBED_TO_TOPIC: their partitions are the ones held).
        Where Kafka would delete a committed offset, zkcoord refuses with
        POLICY_VIOLATION: an offset moves only through the group's
        coordinator, which resets offsets but deletes none (`zkcoord groups
        reset-offsets`, or a commit from outside the group, moves one
        instead). A partition with no committed offset has nothing to
        delete, and is answered done, as Kafka answers it."""
        Topic = OffsetDeleteResponse.OffsetDeleteResponseTopic
        Partition = Topic.OffsetDeleteResponsePartition
        group = request.group_id

        def answer(error: int, partition_error=None):
            """A group's error alone (as Kafka answers one), or every partition's."""
            return OffsetDeleteResponse(version=request.API_VERSION, throttle_time_ms=0, error_code=error, topics=[
                Topic(name=t.name, partitions=[
                    Partition(partition_index=p.partition_index,
                              error_code=partition_error(t.name, p.partition_index)) for p in t.partitions])
                for t in request.topics] if partition_error is not None else [])

        try:
            layout.group_path(group)
        except layout.LayoutError:
            return answer(INVALID_GROUP_ID)
        if not self._allowed(principal, acl.DELETE, acl.group(group), client_host):
            return answer(GROUP_AUTHORIZATION_FAILED)
        from zkcoord.admin.groups import DEAD

        state_name, state = self._state_of(group)
        if state_name == DEAD:
            return answer(GROUP_ID_NOT_FOUND)
        try:
            committed = read_offsets(self.zk, group)
        except ZkcoordError as exc:
            log.info("group %s: offsets not readable: %s", group, exc)
            return answer(COORDINATOR_NOT_AVAILABLE)
        consumed = {t for pairs in (state.assignment if state else {}).values() for t, _ in pairs}
        consumed |= {t for b in self._groups.get(group, {}).values() if not b.member.gone for t in b.member.topics}
        readable = {t.name: self._allowed(principal, acl.READ, acl.topic(t.name), client_host)
                    for t in request.topics}

        def partition_error(topic: str, partition: int) -> int:
            if not readable[topic]:
                return TOPIC_AUTHORIZATION_FAILED
            if topic in consumed:
                return GROUP_SUBSCRIBED_TO_TOPIC
            return POLICY_VIOLATION if TopicPartition(topic, partition) in committed else NONE

        return answer(NONE, partition_error)


def registration_id(member) -> str:
    """The zkcoord consumer id a client's member registers under: its
    group.instance.id if it has one (a static member), else its member id.
    librdkafka makes member ids of standard base64, whose "/" a consumer id
    may not hold."""
    return (member.instance_id or member.member_id).replace("/", "_")


def _as_kafka_host(host: str) -> str:
    return "/" + host if host and not host.startswith("/") else host


def _by_topic(partitions) -> dict[str, list[int]]:
    grouped: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        grouped.setdefault(topic, []).append(partition)
    return grouped


def _assignment_bytes(partitions, version: int) -> bytes:
    Assigned = ConsumerProtocolAssignment.TopicPartition
    assignment = ConsumerProtocolAssignment(
        version=version, user_data=None,
        assigned_partitions=[Assigned(topic=t, partitions=ps) for t, ps in _by_topic(partitions).items()])
    return bytes(assignment.encode(version=version))


def _subscription_bytes(partitions) -> bytes:
    """A subscription for a member we know only by its partitions (a thin consumer)."""
    subscription = ConsumerProtocolSubscription(version=0, topics=sorted(_by_topic(partitions)), user_data=None)
    return bytes(subscription.encode(version=0))

