"""The ACL decision, as Kafka's AclAuthorizer makes it."""

from __future__ import annotations

import pytest

from zkcoord.security import acl
from zkcoord.security.acl import ALLOW, DENY, AclEntry, AclError
from zkcoord.security.principal import ANONYMOUS, user

ALICE, BOB = user("alice"), user("bob")
G = acl.group("orders")


def allow(principal, operation, host="*"):
    return AclEntry(principal, ALLOW, operation, host)


def test_nothing_allowed_without_an_acl():
    assert not acl.authorize({}, ALICE, acl.READ, G)
    assert not acl.authorize({}, ANONYMOUS, acl.DESCRIBE, G)


def test_allow_for_the_named_principal_only():
    acls = {G: [allow("User:alice", acl.READ)]}
    assert acl.authorize(acls, ALICE, acl.READ, G)
    assert not acl.authorize(acls, BOB, acl.READ, G)
    assert not acl.authorize(acls, ALICE, acl.READ, acl.group("other"))
    assert not acl.authorize(acls, ALICE, acl.READ, acl.topic("orders"))


def test_read_implies_describe_but_not_delete():
    acls = {G: [allow("User:alice", acl.READ)]}
    assert acl.authorize(acls, ALICE, acl.DESCRIBE, G)
    assert not acl.authorize(acls, ALICE, acl.DELETE, G)
    assert not acl.authorize({G: [allow("User:alice", acl.DESCRIBE)]}, ALICE, acl.READ, G)


def test_deny_wins_and_all_covers_everything():
    acls = {G: [allow("User:*", acl.ALL), AclEntry("User:bob", DENY, acl.READ)]}
    assert acl.authorize(acls, ALICE, acl.DELETE, G)
    assert not acl.authorize(acls, BOB, acl.READ, G)
    # a Deny of Read does not deny Describe (only what it names)
    assert acl.authorize(acls, BOB, acl.DESCRIBE, G)


def test_wildcard_resource_and_host():
    acls = {acl.group("*"): [allow("User:alice", acl.READ, host="10.0.0.1")]}
    assert acl.authorize(acls, ALICE, acl.READ, G, host="10.0.0.1")
    assert not acl.authorize(acls, ALICE, acl.READ, G, host="10.0.0.2")


def test_super_users_need_no_acl():
    assert acl.authorize({G: [AclEntry("User:alice", DENY, acl.ALL)]}, ALICE, acl.READ, G, super_users=[ALICE])


@pytest.mark.parametrize("args", [("alice", ALLOW, acl.READ), ("User:", ALLOW, acl.READ),
                                  ("User:alice", "Maybe", acl.READ), ("User:alice", ALLOW, "Eat"),
                                  ("User:alice", ALLOW, acl.READ, "")])
def test_bad_entries_refused(args):
    with pytest.raises(AclError):
        AclEntry(*args)


def test_names_are_read_case_insensitively_and_stored_as_kafka_spells_them():
    entry = AclEntry("User:alice", "allow", "READ")
    assert (entry.permission, entry.operation) == (ALLOW, acl.READ)
    assert acl.Resource("group", "x").kind == acl.GROUP
    with pytest.raises(AclError, match="resource type"):
        acl.Resource("Cluster", "x")


def test_refusal_says_who_what_and_which():
    assert acl.refusal(BOB, acl.READ, G) == "User:bob is not authorized to Read group 'orders' (no ACL allows it)"
