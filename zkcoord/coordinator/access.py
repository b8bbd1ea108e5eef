"""What the coordinator lets a principal do, decided from the ACLs (pure;
zkcoord.security.acl makes the decision, this says which it asks for).

Registering in a group asks Read on the group and Read on each topic the
subscription names (topics a pattern matches are not checked here: the
broker's Fetch checks Read on every topic it serves). A registered member's
commits (its offsets in Ping, Stop and LeaveGroup answers) are covered by
the Read its registration proved. An offset reset asks Describe on the group
to look, Delete to execute (it rewrites what the group has consumed); a look
at the group's members (DescribeGroupRequest) asks Describe.
"""

from __future__ import annotations

from typing import Iterable

from zkcoord import wire
from zkcoord.security import acl
from zkcoord.security.principal import Principal


def _require(acls, principal: Principal, operation: str, resource: acl.Resource, host: str,
             super_users: Iterable[Principal], error: type) -> None:
    if not acl.authorize(acls, principal, operation, resource, host, super_users):
        raise error(acl.refusal(principal, operation, resource))


def check_registration(acls, principal: Principal, host: str, request: wire.RegisterConsumerRequest,
                       super_users: Iterable[Principal] = ()) -> None:
    """Raise the wire error to answer ``request`` with, if ``principal`` may not register."""
    _require(acls, principal, acl.READ, acl.group(request.group_id), host, super_users,
             wire.GroupAuthorizationFailed)
    for topic in request.topics:
        _require(acls, principal, acl.READ, acl.topic(topic), host, super_users, wire.TopicAuthorizationFailed)


def check_reset(acls, principal: Principal, host: str, request: wire.ResetOffsetsRequest,
                super_users: Iterable[Principal] = ()) -> None:
    operation = acl.DELETE if request.execute else acl.DESCRIBE
    _require(acls, principal, operation, acl.group(request.group_id), host, super_users,
             wire.GroupAuthorizationFailed)


def check_describe(acls, principal: Principal, host: str, request: wire.DescribeGroupRequest,
                   super_users: Iterable[Principal] = ()) -> None:
    _require(acls, principal, acl.DESCRIBE, acl.group(request.group_id), host, super_users,
             wire.GroupAuthorizationFailed)


# The check of each request a server admits (coordinator/server.py), by its type.
CHECKS = {
    wire.RegisterConsumerRequest: check_registration,
    wire.ResetOffsetsRequest: check_reset,
    wire.DescribeGroupRequest: check_describe,
}
