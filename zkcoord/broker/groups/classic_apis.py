"""JoinGroup, SyncGroup, Heartbeat and LeaveGroup: the classic group
protocol's requests served for stock clients.

What each request gets is :class:`~zkcoord.broker.groups.classic.ClassicMember`'s
decision; this part finds the client's member, registers a new one with its
coordinator (``bridge.py``) and answers. A JoinGroup waits in its
connection's greenlet for its member's registration, as Kafka's does.

A part of :class:`~zkcoord.broker.groups.bridge.GroupBridge`, whose members it serves.
"""

from __future__ import annotations

import logging
import uuid
from typing import Optional

from kafka.protocol.consumer import HeartbeatResponse, JoinGroupResponse, LeaveGroupResponse, SyncGroupResponse
from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription, ConsumerProtocolType

from zkcoord.broker.groups import classic, protocols
from zkcoord.broker.groups.answers import (
    FENCED_INSTANCE_ID, GROUP_AUTHORIZATION_FAILED, INCONSISTENT_GROUP_PROTOCOL, INVALID_GROUP_ID,
    MAX_PENDING_IDS, MEMBER_ID_REQUIRED, NONE, assignment_bytes,
)
from zkcoord.broker.groups.classic import ClassicMember
from zkcoord.broker.groups.fences import tie_of
from zkcoord.records import TopicPartition
from zkcoord.security import acl
from zkcoord.security.principal import ANONYMOUS, Principal
from zkcoord.zk import layout

log = logging.getLogger(__name__)

# How long a new member's JoinGroup waits for its first Start, once the
# coordinator registered it (a member that gets nothing hears no Start; it is
# answered with an empty assignment, and asked to rejoin if one comes).
FIRST_START_WAIT_S = 3.0


class ClassicApis:
    """The classic group protocol's requests, served over the bridge's members."""

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
            choice = protocols.choose_protocol(list(offered))
            protocol_name = choice.name
            subscription = ConsumerProtocolSubscription.decode(bytes(offered[protocol_name]))
        except protocols.InconsistentProtocols as exc:
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
        try:
            protocols.check_shares_protocol(list(offered), self._stock_protocols(request.group_id, member_id))
        except protocols.InconsistentProtocols as exc:
            log.info("group %s: refusing member %s: %s", request.group_id, member_id or "(new)", exc)
            return answer(INCONSISTENT_GROUP_PROTOCOL, member_id)
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
                member.offered = tuple(offered)
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
        if choice.stand_in:
            log.info("group %s: member %s (client %r): %s", request.group_id, member_id,
                     request.header.client_id or "", choice.why)
        member = ClassicMember(
            member_id=member_id, protocol_name=protocol_name, offered=tuple(offered), topics=topics,
            session_timeout_ms=request.session_timeout_ms,
            rebalance_timeout_ms=getattr(request, "rebalance_timeout_ms", -1) if version >= 1
            else request.session_timeout_ms,
            instance_id=instance_id, client_id=request.header.client_id or "", client_host=client_host,
            last_heard=now, subscription=bytes(offered[protocol_name]), principal=principal)
        if member.rebalance_timeout_ms <= 0:
            member.rebalance_timeout_ms = member.session_timeout_ms
        bridged = self._add(member, request.group_id)
        error = self._register(bridged, choice.strategies)
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

    def _stock_protocols(self, group: str, member_id: str) -> list[tuple[str, ...]]:
        """What each other live classic member of ``group`` offered. Every
        stock client of a group is sent to one broker (FindCoordinator), so
        this bridge's are the group's."""
        return [b.member.offered for b in self._groups.get(group, {}).values()
                if isinstance(b.member, ClassicMember) and not b.member.gone and b.member.member_id != member_id]

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
        return answer(NONE, assignment_bytes(given, 1 if bridged.member.cooperative else 0))

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
