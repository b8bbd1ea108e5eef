"""A group's members as its coordinator holds them now, for `zkcoord groups
describe --members` and the console's group page.

ZooKeeper holds what the coordinator wrote at the group's last round (each
member's host, client id, kind, static flag and session timeout). How long a
member's lease may still run and the request it has not answered live only
in the coordinator's memory: persisting them would cost a ZooKeeper write per
ping. So this asks the coordinator of the group's slot
(DescribeGroupRequest, wire/README.md) and puts its answer in place of the
members a describe read from ZooKeeper; when the coordinator cannot be
reached or refuses, the view keeps ZooKeeper's members and says why.
"""

from __future__ import annotations

from typing import Optional

from zkcoord import wire
from zkcoord.admin.client import ask_coordinator, group_coordinator
from zkcoord.errors import ZkcoordError
from zkcoord.zk.nodes import read_servers

# How long a look at the members waits for the coordinator's answer: a page
# that refreshes every second must not hang on a coordinator that is gone.
ASK_TIMEOUT_S = 2.0
# Where a view's members come from (its "members_from").
FROM_COORDINATOR = "coordinator"
FROM_ZOOKEEPER = "zookeeper"


class LiveUnavailable(ZkcoordError):
    """The group's coordinator could not say who its members are now: none
    elected, out of reach, or it refused (the message says which)."""

    retriable = True


def live_members(client, group: str, tls=None, credential: Optional[tuple[str, str]] = None,
                 timeout_s: float = ASK_TIMEOUT_S) -> wire.DescribeGroupResponse:
    """The coordinator of ``group``'s slot's DescribeGroupResponse, asked
    over ``tls`` (a client SSLContext, None: plaintext) as ``credential``
    ((user, password), None: anonymous); LiveUnavailable if it cannot be had."""
    slot, _, server, _ = group_coordinator(client, group)
    if server is None:
        raise LiveUnavailable(f"no coordinator is elected for group {group!r} (slot {slot})")
    endpoint = read_servers(client).get(server)
    if endpoint is None:
        raise LiveUnavailable(f"coordinator server {server} of group {group!r} is not registered")
    user, password = credential or ("", "")
    request = wire.DescribeGroupRequest(group_id=group, user=user, password=password)
    where = f"coordinator server {server} at {endpoint.host}:{endpoint.port}"
    try:
        answer = ask_coordinator((endpoint.host, endpoint.port), request, tls, timeout_s)
    except (ZkcoordError, OSError) as exc:
        raise LiveUnavailable(f"{where}: {exc or type(exc).__name__}") from None
    if answer.error_code != wire.ErrorCode.NONE:
        error = wire.error_for(answer.error_code, answer.error_message)
        raise LiveUnavailable(f"{where}: {type(error).__name__}: {error}")
    return answer


def member_view(described: wire.MemberDescription) -> dict:
    """One member of a DescribeGroupResponse as a describe's member entry."""
    return {"consumer_id": described.member_id, "host": described.host or None,
            "client_id": described.client_id or None, "static": described.is_static,
            "session_timeout_ms": described.session_timeout_ms, "kind": described.client_kind or None,
            "lease_remaining_ms": described.lease_remaining_ms if described.lease_remaining_ms >= 0 else None,
            "connected": described.lease_remaining_ms >= 0, "outstanding": described.outstanding or None,
            "partitions": [{"topic": tp.topic, "partition": tp.partition} for tp in described.partitions]}


def with_live_members(view: dict, ask) -> dict:
    """``view`` (a describe's document) with its members as ``ask()`` (a
    DescribeGroupResponse) says, ``members_from`` saying where they come
    from and ``members_unavailable`` why not from the coordinator (None when
    they are). A LiveUnavailable leaves ZooKeeper's members in place."""
    try:
        answer = ask()
    except LiveUnavailable as exc:
        return {**view, "members_from": FROM_ZOOKEEPER, "members_unavailable": str(exc)}
    return {**view, "members": [member_view(m) for m in answer.members], "members_from": FROM_COORDINATOR,
            "members_unavailable": None}


def kind_name(kind: Optional[str]) -> str:
    """What operators are shown for a member's kind of client ("-": not said)."""
    return wire.CLIENT_KINDS.get(kind, kind) if kind else "-"


def lease_text(member: dict) -> str:
    """A member's lease remaining as shown: seconds, "away" for a static member not connected, "-" unknown."""
    if member.get("connected") is False:
        return "away"
    remaining = member.get("lease_remaining_ms")
    return "-" if remaining is None else f"{remaining / 1000:.1f} s"
