"""ConsumerGroupHeartbeat (KIP-848): the new consumer protocol's one request,
served for stock clients.

What a heartbeat gets is :class:`~zkcoord.broker.groups.kip848.ConsumerMember`'s
decision; this part validates the request, joins a new member (registered
with its coordinator by ``bridge.py``) and answers with topic ids.

A part of :class:`~zkcoord.broker.groups.bridge.GroupBridge`, whose members it serves.
"""

from __future__ import annotations

import logging
import uuid
from typing import Optional


from zkcoord.broker.groups import classic, kip848
from zkcoord.broker.groups.answers import (
    FENCED_INSTANCE_ID, GROUP_AUTHORIZATION_FAILED, INVALID_GROUP_ID, INVALID_REQUEST, NONE, by_topic,
)
from zkcoord.broker.groups.fences import tie_of
from zkcoord.broker.groups.kip848 import (
    FENCED_MEMBER_EPOCH, JOIN_EPOCH, LEAVE_EPOCH, STATIC_LEAVE_EPOCH, ConsumerMember,
)
from zkcoord.broker.groups.messages import ConsumerGroupHeartbeatResponse
from zkcoord.patterns import PatternError, check_pattern
from zkcoord.records import TopicPartition
from zkcoord.security import acl
from zkcoord.security.principal import ANONYMOUS, Principal
from zkcoord.zk import layout

log = logging.getLogger(__name__)


class ConsumerGroupApis:
    """KIP-848's ConsumerGroupHeartbeat, served over the bridge's members."""

    def consumer_group_heartbeat(self, request, client_host: str, principal: Principal = ANONYMOUS):
        version = request.API_VERSION
        epoch = request.member_epoch

        def answer(error: int, member: Optional[ConsumerMember] = None, assignment=None,
                   message: Optional[str] = None, member_epoch: Optional[int] = None):
            Assignment = ConsumerGroupHeartbeatResponse.Assignment
            ids = self._topic_ids()
            sent = None if assignment is None else Assignment(topic_partitions=[
                Assignment.TopicPartitions(topic_id=layout.parse_kafka_uuid(ids[t]), partitions=ps)
                for t, ps in by_topic(assignment).items() if t in ids])
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
