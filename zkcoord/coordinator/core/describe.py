"""What operators are told of a group's members by its coordinator.

Owns no state: it checks what a registration says the client is (its kind
and client id, RegisterConsumerRequest version 5, kept on the member for
operators only), and answers DescribeGroupRequest from what the other parts
hold in memory now: each member's kind, client id, host, static id, session
timeout, what it runs, the request it has not answered, and how long its
lease may still run. The lease is live state that is never persisted (that
would cost a ZooKeeper write per ping), so only the coordinator can say it.
"""

from __future__ import annotations

from typing import Hashable

from zkcoord import wire
from zkcoord.coordinator.actions import Close, Send
from zkcoord.coordinator.core.groups import GroupTable
from zkcoord.coordinator.core.office import Office
from zkcoord.coordinator.core.outbox import Outbox
from zkcoord.coordinator.group import Group, Member
from zkcoord.coordinator.lease import lease_end
from zkcoord.records import TopicPartition
from zkcoord.zk import layout

# A member's lease_remaining_ms while it is not connected (a static member away).
NOT_CONNECTED = -1


def check_client(request: wire.RegisterConsumerRequest) -> None:
    """Raise InvalidRegistration if ``request`` names a kind of client there
    is none of, or a client id too long to keep in the group's state."""
    if request.client_kind and request.client_kind not in wire.CLIENT_KINDS:
        raise wire.InvalidRegistration(f"client kind {request.client_kind!r} is none of "
                                       f"{', '.join(wire.CLIENT_KINDS)}")
    if len(request.client_id.encode("utf-8")) > wire.MAX_CLIENT_ID_BYTES:
        raise wire.InvalidRegistration(f"client id of {len(request.client_id.encode('utf-8'))} bytes is longer "
                                       f"than {wire.MAX_CLIENT_ID_BYTES}")


def lease_remaining_ms(member: Member, now: float) -> int:
    """How long ``member``'s lease may still run, at most: its session
    timeout after the last request sent to it (lease.py; the lease runs from
    the member's answer before that request, so it may end sooner), 0 once
    that has passed, NOT_CONNECTED while it has no connection."""
    if not member.connected:
        return NOT_CONNECTED
    return max(0, round((lease_end(member.last_sent, member.session_timeout_ms, 0) - now) * 1000))


def description(member: Member, now: float) -> wire.MemberDescription:
    outstanding = member.outstanding
    return wire.MemberDescription(
        member_id=member.member_id, client_kind=member.client_kind, client_id=member.client_id, host=member.host,
        is_static=member.is_static, session_timeout_ms=member.session_timeout_ms,
        lease_remaining_ms=lease_remaining_ms(member, now),
        partitions=tuple(TopicPartition(*tp) for tp in sorted(member.may_run)),
        outstanding=type(outstanding.message).__name__ if outstanding is not None else "")


class Describe:
    def __init__(self, office: Office, out: Outbox, groups: GroupTable):
        self.office = office
        self.out = out
        self.groups = groups

    def describe_group(self, conn: Hashable, request: wire.DescribeGroupRequest, correlation_id: int,
                       now: float) -> None:
        """See CoordinatorCore.describe_group."""
        try:
            group = self._group(request.group_id)
        except wire.WireError as exc:
            answer = wire.DescribeGroupResponse(error_code=exc.code, error_message=str(exc))
        else:
            members = sorted(group.members.values(), key=lambda m: m.member_id) if group else ()
            answer = wire.DescribeGroupResponse(
                coordinator_epoch=self.office.epoch, generation=group.generation if group else 0,
                phase=(group.phase.value if group else "empty"),
                members=tuple(description(m, now) for m in members))
        self.out.emit(Send(conn, answer, correlation_id))
        self.out.emit(Close(conn))

    def _group(self, name: str) -> Group | None:
        """The group ``name`` as held here (None: it has no members here), or the WireError that refuses it."""
        try:
            layout.group_path(name)
        except layout.LayoutError as exc:
            raise wire.InvalidRequest(str(exc)) from None
        if self.office.deposed:
            raise wire.NotCoordinator(f"coordinator epoch {self.office.epoch} has stepped down")
        if self.office.loading:
            raise wire.CoordinatorNotAvailable("the coordinator is still loading its groups")
        return self.groups.get(name)
