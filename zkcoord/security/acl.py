"""Access control lists and the decision they make: pure code, no I/O.

An ACL entry is Kafka's: a principal ("User:alice", or "User:*" for anyone),
Allow or Deny, an operation, and a host ("*" for any). Entries hang on a
resource (a group or a topic, by literal name; the name "*" matches every
resource of its type; or the cluster, Kafka's one resource "kafka-cluster").
:func:`authorize` answers as Kafka's AclAuthorizer does: a super user may do
anything; a matching Deny wins over any Allow; Read, Write, Delete and Alter
imply Describe, AlterConfigs implies DescribeConfigs; with no matching Allow
the answer is no.

What each zkcoord operation asks for (docs/SECURITY.md has the table):
joining a group, committing and fetching offsets of it is Read on the group
(and Read on each topic subscribed); describing a group is Describe on it;
resetting a group's offsets is Delete on it (Kafka's kafka-consumer-groups
--reset-offsets commits as the group, and --delete needs Delete: a reset
rewrites history, so it asks the stronger right); a broker Fetch is Read on
the topic, Metadata Describe on it; an idempotent producer's id is
IdempotentWrite on the cluster, or Write on any topic (Kafka 3.0, KIP-679).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Iterable, Mapping

from zkcoord.errors import ConfigError
from zkcoord.security.principal import Principal

GROUP = "Group"
TOPIC = "Topic"
CLUSTER = "Cluster"
RESOURCE_TYPES = (GROUP, TOPIC, CLUSTER)
WILDCARD = "*"
# Kafka's name of the one cluster resource (kafka-acls --cluster).
CLUSTER_NAME = "kafka-cluster"

ALLOW = "Allow"
DENY = "Deny"
PERMISSIONS = (ALLOW, DENY)

READ = "Read"
WRITE = "Write"
DESCRIBE = "Describe"
DELETE = "Delete"
ALTER = "Alter"
CREATE = "Create"
CLUSTER_ACTION = "ClusterAction"
DESCRIBE_CONFIGS = "DescribeConfigs"
ALTER_CONFIGS = "AlterConfigs"
IDEMPOTENT_WRITE = "IdempotentWrite"
ALL = "All"
OPERATIONS = (ALL, READ, WRITE, DESCRIBE, DELETE, ALTER, CREATE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS,
              IDEMPOTENT_WRITE)
# Kafka: an Allow of one of these also allows the key (AclAuthorizer's implied operations).
_IMPLIED_BY = {DESCRIBE: (READ, WRITE, DELETE, ALTER), DESCRIBE_CONFIGS: (ALTER_CONFIGS,)}
# What an ACL of each resource type may name, as kafka-acls checks it.
OPERATIONS_OF = {
    TOPIC: (ALL, READ, WRITE, CREATE, DESCRIBE, DELETE, ALTER, DESCRIBE_CONFIGS, ALTER_CONFIGS),
    GROUP: (ALL, READ, DESCRIBE, DELETE),
    CLUSTER: (ALL, CREATE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE, ALTER, DESCRIBE),
}
# Kafka's AclOperation codes: the bit each sets in a response's authorized operations.
_OPERATION_CODES = {READ: 3, WRITE: 4, CREATE: 5, DELETE: 6, ALTER: 7, DESCRIBE: 8, CLUSTER_ACTION: 9,
                    DESCRIBE_CONFIGS: 10, ALTER_CONFIGS: 11, IDEMPOTENT_WRITE: 12}


class AclError(ConfigError):
    """An ACL entry or resource that cannot be stored: the message names the field."""


def _choice(value: object, choices: tuple, what: str) -> str:
    # Kafka spells these in CamelCase but reads them case-insensitively.
    if isinstance(value, str):
        for choice in choices:
            if value.lower() == choice.lower():
                return choice
    raise AclError(f"{what} must be one of {', '.join(choices)}, not {value!r}")


@dataclasses.dataclass(frozen=True, order=True)
class AclEntry:
    principal: str
    permission: str
    operation: str
    host: str = WILDCARD

    def __post_init__(self) -> None:
        if not isinstance(self.principal, str) or (self.principal != WILDCARD
                                                    and ":" not in self.principal):
            raise AclError(f"an ACL's principal must be TYPE:NAME (User:alice, User:*), not {self.principal!r}")
        kind, _, name = self.principal.partition(":")
        if not kind or not name:
            raise AclError(f"an ACL's principal must be TYPE:NAME (User:alice, User:*), not {self.principal!r}")
        object.__setattr__(self, "permission", _choice(self.permission, PERMISSIONS, "permissionType"))
        object.__setattr__(self, "operation", _choice(self.operation, OPERATIONS, "operation"))
        if not isinstance(self.host, str) or not self.host:
            raise AclError(f"an ACL's host must be an address or '*', not {self.host!r}")

    def matches(self, principal: Principal, host: str) -> bool:
        if self.principal != str(principal) and self.principal != f"{principal.kind}:{WILDCARD}":
            return False
        return self.host in (WILDCARD, host)


@dataclasses.dataclass(frozen=True, order=True)
class Resource:
    kind: str
    name: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", _choice(self.kind, RESOURCE_TYPES, "resource type"))
        # An empty name is a resource a request may name (a client's empty
        # group id) and no ACL can: storing one refuses it (resource_path).
        if not isinstance(self.name, str):
            raise AclError(f"a {self.kind} resource's name must be a string, not {self.name!r}")

    def __str__(self) -> str:
        return f"{self.kind}:{self.name}"


def group(name: str) -> Resource:
    return Resource(GROUP, name)


def topic(name: str) -> Resource:
    return Resource(TOPIC, name)


def cluster() -> Resource:
    return Resource(CLUSTER, CLUSTER_NAME)


def check_operations(resource: Resource, entries: Iterable[AclEntry]) -> None:
    """Refuse an entry naming an operation its resource does not have
    (IdempotentWrite on a topic), as kafka-acls refuses it."""
    valid = OPERATIONS_OF[resource.kind]
    for entry in entries:
        if entry.operation not in valid:
            raise AclError(f"a {resource.kind} ACL may name {', '.join(valid)}, not {entry.operation}")


Acls = Mapping[Resource, Iterable[AclEntry]]


def _covers(entry_operation: str, operation: str, permission: str) -> bool:
    if entry_operation in (ALL, operation):
        return True
    # Implication widens only what is allowed; a Deny denies what it names.
    return permission == ALLOW and entry_operation in _IMPLIED_BY.get(operation, ())


def authorize(acls: Acls, principal: Principal, operation: str, resource: Resource, host: str = "",
              super_users: Iterable[Principal] = ()) -> bool:
    """Whether ``principal`` connecting from ``host`` may do ``operation`` on ``resource``."""
    if principal in set(super_users):
        return True
    entries = [*acls.get(resource, ()), *acls.get(Resource(resource.kind, WILDCARD), ())]
    matching = [e for e in entries if e.matches(principal, host)]
    if any(e.permission == DENY and _covers(e.operation, operation, DENY) for e in matching):
        return False
    return any(e.permission == ALLOW and _covers(e.operation, operation, ALLOW) for e in matching)


def authorize_any(acls: Acls, principal: Principal, operation: str, kind: str, host: str = "",
                  super_users: Iterable[Principal] = ()) -> bool:
    """Whether ``principal`` may do ``operation`` on some resource of type
    ``kind`` (Kafka's authorizeByResourceType): an Allow of it (or All) on one,
    unless a Deny on that one or on all of them (``*``) takes it back.
    Implied operations do not count, as in Kafka."""
    if principal in set(super_users):
        return True

    def entries(resource, permission):
        return [e for e in acls.get(resource, ()) if e.permission == permission and e.operation in (ALL, operation)
                and e.matches(principal, host)]

    if entries(Resource(kind, WILDCARD), DENY):
        return False
    return any(entries(resource, ALLOW) and not entries(resource, DENY)
               for resource in acls if resource.kind == kind)


def authorized_operations(kind: str, allowed: Callable[[str], bool]) -> frozenset[int]:
    """Kafka's codes of the operations on a resource of type ``kind`` that
    ``allowed(operation)`` allows: the bits of a response's authorized operations."""
    return frozenset(_OPERATION_CODES[op] for op in OPERATIONS_OF[kind] if op != ALL and allowed(op))


def refusal(principal: Principal, operation: str, resource: Resource) -> str:
    """The one sentence every refusal says."""
    return (f"{principal} is not authorized to {operation} {resource.kind.lower()} {resource.name!r} "
            f"(no ACL allows it)")
