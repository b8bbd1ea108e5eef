"""Authenticated members and group ACLs on a real server: thin consumers
register with a credential (RegisterConsumer version 3) checked against the
users in ZooKeeper, the authorizer decides from the ACLs in ZooKeeper, a
static id stays its principal's, and every refusal reaches the application
from poll() as its typed error."""

from __future__ import annotations

import time

import pytest

from tests.e2e.checks import produce
from tests.e2e.conftest import SERVER_ARGS
from zkcoord import wire
from zkcoord.consumer.consumer import Consumer
from zkcoord.security import acl, store
from zkcoord.testing.waiting import wait_until

TOPIC = "events"
PARTITIONS = 2


@pytest.fixture(scope="module")
def secured(zk_ensemble, tmp_path_factory):
    """One server with the authorizer on; alice may read group g and the
    topic, carol only the group, bob nothing; admin is a super user."""
    from zkcoord.testing import LocalCluster, fresh_chroot

    with fresh_chroot(zk_ensemble.connect_string, "sec") as (connect, zk):
        for name in ("alice", "bob", "carol", "mallory", "admin"):
            store.set_user(zk, name, f"{name}-pw")
        for who in ("alice", "carol", "mallory"):
            store.add_acls(zk, acl.group("g"), [acl.AclEntry(f"User:{who}", acl.ALLOW, acl.READ)])
        for who in ("alice", "mallory"):
            store.add_acls(zk, acl.topic(TOPIC), [acl.AclEntry(f"User:{who}", acl.ALLOW, acl.READ)])
        with LocalCluster(connect, tmp_path_factory.mktemp("secured"),
                          SERVER_ARGS + ("--authorizer", "on", "--super-user", "User:admin")) as cluster:
            cluster.start_servers(1)
            cluster.create_topic(TOPIC, PARTITIONS)
            produce(cluster, TOPIC, 40, partitions=PARTITIONS)
            yield cluster


def member(cluster, name, password=None, **settings):
    settings.setdefault("session_timeout_ms", 6000)
    settings.setdefault("group", "g")
    credential = {} if name is None else {"user": name, "password": password or f"{name}-pw"}
    return Consumer(cluster.bootstrap, topics=[TOPIC], **credential, **settings)


def refusal(consumer, timeout=20.0) -> Exception:
    """The error poll() raises, within ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            consumer.poll(200)
        except wire.WireError as exc:
            return exc
    raise AssertionError(f"poll() raised nothing in {timeout}s")


def test_an_authorized_user_consumes(secured):
    with member(secured, "alice") as alice:
        got = []
        wait_until(lambda: got.extend(alice.poll(200)) or len(got) >= 40, timeout=30,
                   message="alice to read the topic")
        assert sorted(r.value for r in got) == sorted(f"m-{n}".encode() for n in range(40))


def test_a_super_user_needs_no_acl(secured):
    with member(secured, "admin", group="g-admin") as admin:
        wait_until(lambda: admin.membership.registered.is_set(), timeout=20, message="admin to register")


@pytest.mark.parametrize("name, password, error, reason", [
    ("alice", "wrong", wire.AuthenticationFailed, "user 'alice': unknown user or wrong password"),
    ("nobody", "pw", wire.AuthenticationFailed, "user 'nobody': unknown user or wrong password"),
    ("bob", None, wire.GroupAuthorizationFailed, "User:bob is not authorized to Read group 'g'"),
    (None, None, wire.GroupAuthorizationFailed, "User:ANONYMOUS is not authorized to Read group 'g'"),
    ("carol", None, wire.TopicAuthorizationFailed, "User:carol is not authorized to Read topic 'events'"),
])
def test_refusals_reach_poll_as_typed_errors(secured, name, password, error, reason):
    with member(secured, name, password) as refused:
        exc = refusal(refused)
        assert isinstance(exc, error), exc
        assert reason in str(exc)


def test_a_static_id_is_its_principals(secured):
    with member(secured, "alice", consumer_id="pinned") as alice:
        wait_until(lambda: alice.poll(100) is not None and alice.assignment(), timeout=30,
                   message="alice to hold partitions")
        held = alice.assignment()
        with member(secured, "mallory", consumer_id="pinned") as mallory:
            exc = refusal(mallory)
            assert isinstance(exc, wire.StaticMemberOwnedByOtherPrincipal), exc
            assert "held by User:alice; User:mallory may not take it over" in str(exc)
        alice.poll(100)
        assert alice.assignment() == held and alice.membership.error is None
