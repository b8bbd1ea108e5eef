"""Which ACL each coordinator request asks for (coordinator/access.py)."""

from __future__ import annotations

import pytest

from zkcoord import wire
from zkcoord.coordinator import access
from zkcoord.errors import ConfigError
from zkcoord.member.config import MemberConfig
from zkcoord.security import acl
from zkcoord.security.acl import ALLOW, AclEntry
from zkcoord.security.principal import user

ALICE = user("alice")
REGISTRATION = wire.RegisterConsumerRequest(group_id="g", consumer_id="c", topics=("t",))


def test_registration_asks_read_on_the_group_then_on_each_topic():
    with pytest.raises(wire.GroupAuthorizationFailed, match="User:alice is not authorized to Read group 'g'"):
        access.check_registration({}, ALICE, "h", REGISTRATION)
    group_only = {acl.group("g"): [AclEntry("User:alice", ALLOW, acl.READ)]}
    with pytest.raises(wire.TopicAuthorizationFailed, match="to Read topic 't'"):
        access.check_registration(group_only, ALICE, "h", REGISTRATION)
    both = {**group_only, acl.topic("t"): [AclEntry("User:alice", ALLOW, acl.READ)]}
    access.check_registration(both, ALICE, "h", REGISTRATION)
    access.check_registration({}, ALICE, "h", REGISTRATION, super_users=[ALICE])


def test_a_reset_asks_describe_to_look_and_delete_to_execute():
    describe = {acl.group("g"): [AclEntry("User:alice", ALLOW, acl.DESCRIBE)]}
    access.check_reset(describe, ALICE, "h", wire.ResetOffsetsRequest(group_id="g"))
    with pytest.raises(wire.GroupAuthorizationFailed, match="to Delete group 'g'"):
        access.check_reset(describe, ALICE, "h", wire.ResetOffsetsRequest(group_id="g", execute=True))


def test_a_look_at_a_groups_members_asks_describe_on_the_group():
    request = wire.DescribeGroupRequest(group_id="g")
    with pytest.raises(wire.GroupAuthorizationFailed, match="User:alice is not authorized to Describe group 'g'"):
        access.CHECKS[wire.DescribeGroupRequest]({acl.group("other"): [AclEntry("User:alice", ALLOW, acl.DESCRIBE)]},
                                                 ALICE, "h", request)
    access.CHECKS[wire.DescribeGroupRequest]({acl.group("g"): [AclEntry("User:alice", ALLOW, acl.DESCRIBE)]},
                                             ALICE, "h", request)
    assert "pw" not in repr(wire.DescribeGroupRequest(group_id="g", user="u", password="pw"))


def test_passwords_stay_out_of_reprs():
    request = wire.RegisterConsumerRequest(group_id="g", consumer_id="c", topics=("t",), user="u", password="s3cret")
    config = MemberConfig(group="g", topics=("t",), user="u", password="s3cret")
    assert "s3cret" not in repr(request) and "s3cret" not in repr(config)
    assert "u" in repr(request)


def test_a_credential_needs_both_halves():
    with pytest.raises(ConfigError, match="both a user and a password"):
        MemberConfig(group="g", topics=("t",), user="u")
