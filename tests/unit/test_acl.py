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
        acl.Resource("DelegationToken", "x")


def test_refusal_says_who_what_and_which():
    assert acl.refusal(BOB, acl.READ, G) == "User:bob is not authorized to Read group 'orders' (no ACL allows it)"


C = acl.cluster()


def test_the_cluster_is_kafkas_one_resource():
    assert (C.kind, C.name, str(C)) == ("Cluster", "kafka-cluster", "Cluster:kafka-cluster")
    assert acl.Resource("cluster", "kafka-cluster") == C


def test_alter_configs_implies_describe_configs_and_nothing_else_does():
    assert acl.authorize({C: [allow("User:alice", acl.ALTER_CONFIGS)]}, ALICE, acl.DESCRIBE_CONFIGS, C)
    for other in (acl.DESCRIBE, acl.ALTER, acl.IDEMPOTENT_WRITE):
        assert not acl.authorize({C: [allow("User:alice", other)]}, ALICE, acl.DESCRIBE_CONFIGS, C)
    # nor does Write on the cluster imply IdempotentWrite
    assert not acl.authorize({C: [allow("User:alice", acl.WRITE)]}, ALICE, acl.IDEMPOTENT_WRITE, C)
    # a Deny of AlterConfigs denies only AlterConfigs
    acls = {C: [allow("User:alice", acl.ALL), AclEntry("User:alice", DENY, acl.ALTER_CONFIGS)]}
    assert acl.authorize(acls, ALICE, acl.DESCRIBE_CONFIGS, C)


def test_write_on_any_topic_as_kafkas_authorize_by_resource_type():
    t = acl.topic("t")
    assert not acl.authorize_any({}, ALICE, acl.WRITE, acl.TOPIC)
    assert acl.authorize_any({t: [allow("User:alice", acl.WRITE)]}, ALICE, acl.WRITE, acl.TOPIC)
    assert acl.authorize_any({t: [allow("User:*", acl.ALL)]}, ALICE, acl.WRITE, acl.TOPIC)
    assert not acl.authorize_any({t: [allow("User:bob", acl.WRITE)]}, ALICE, acl.WRITE, acl.TOPIC)
    # implied operations do not count, and a group is no topic
    assert not acl.authorize_any({t: [allow("User:alice", acl.READ)]}, ALICE, acl.WRITE, acl.TOPIC)
    assert not acl.authorize_any({G: [allow("User:alice", acl.ALL)]}, ALICE, acl.WRITE, acl.TOPIC)
    # a Deny on the same topic takes it back; on '*' it takes back every one
    assert not acl.authorize_any({t: [allow("User:alice", acl.WRITE), AclEntry("User:alice", DENY, acl.WRITE)]},
                                 ALICE, acl.WRITE, acl.TOPIC)
    assert acl.authorize_any({t: [allow("User:alice", acl.WRITE)],
                              acl.topic("u"): [AclEntry("User:alice", DENY, acl.WRITE)]}, ALICE, acl.WRITE, acl.TOPIC)
    assert not acl.authorize_any({t: [allow("User:alice", acl.WRITE)],
                                  acl.topic("*"): [AclEntry("User:*", DENY, acl.ALL)]}, ALICE, acl.WRITE, acl.TOPIC)
    assert acl.authorize_any({}, ALICE, acl.WRITE, acl.TOPIC, super_users=[ALICE])


def test_authorized_operations_are_kafkas_codes():
    allowed = {acl.DESCRIBE, acl.IDEMPOTENT_WRITE, acl.READ}  # Read is no cluster operation
    assert acl.authorized_operations(acl.CLUSTER, allowed.__contains__) == {8, 12}
    assert acl.authorized_operations(acl.GROUP, lambda _op: True) == {3, 6, 8}


def test_an_operation_a_resource_does_not_have_is_refused():
    acl.check_operations(C, [allow("User:alice", acl.IDEMPOTENT_WRITE)])
    with pytest.raises(AclError, match="a Topic ACL may name .* not IdempotentWrite"):
        acl.check_operations(acl.topic("t"), [allow("User:alice", acl.IDEMPOTENT_WRITE)])
    with pytest.raises(AclError, match="not Write"):
        acl.check_operations(G, [allow("User:alice", acl.WRITE)])
