"""FindCoordinator, ListGroups and DescribeGroups on the broker: where a
group's clients are sent, which groups there are and what each is, as
ZooKeeper and this broker's members say.

A part of :class:`~zkcoord.broker.groups.bridge.GroupBridge`, whose state
(its members, its ZooKeeper client, its authorizer) it reads.
"""

from __future__ import annotations

import logging
from typing import Optional

from kafka.protocol.admin import DescribeGroupsResponse, ListGroupsResponse
from kafka.protocol.consumer.metadata import ConsumerProtocolType
from kafka.protocol.metadata import FindCoordinatorResponse

from zkcoord.broker.groups.answers import (
    COORDINATOR_NOT_AVAILABLE, GROUP_AUTHORIZATION_FAILED, GROUP_TYPE, NONE, UNKNOWN_STATE, as_kafka_host,
    assignment_bytes, registration_id, subscription_bytes,
)
from zkcoord.errors import ZkcoordError
from zkcoord.records import TopicPartition
from zkcoord.security import acl
from zkcoord.security.principal import ANONYMOUS, Principal
from zkcoord.zk import layout

log = logging.getLogger(__name__)


class GroupDirectory:
    """The bridge's answers about groups: their coordinator, the list, their descriptions."""

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
                    client_host=as_kafka_host(bridged.member.client_host if bridged else recorded.host),
                    member_metadata=bridged.member.subscription if bridged else subscription_bytes(partitions),
                    member_assignment=assignment_bytes(partitions, 0)))
            described.append(Group(error_code=NONE, error_message=None, group_id=group, group_state=state_name,
                                   protocol_type=ConsumerProtocolType,
                                   protocol_data=state.strategy if state and state.assignment else "",
                                   members=members))
        return DescribeGroupsResponse(version=request.API_VERSION, throttle_time_ms=0, groups=described)
