"""Users and ACLs in a real ZooKeeper: the nodes are Kafka's, the commands
round-trip and refuse bad input with exit 2, and the ACL cache follows changes."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from zkcoord.security import acl, scram
from zkcoord.security.principal import user
from zkcoord.security.secrets import write_private
from zkcoord.testing import wait_until
from zkcoord.zk import security_store as store


def zkcoord(*args, stdin=""):
    return subprocess.run([sys.executable, "-m", "zkcoord.cli", *args], input=stdin,
                          capture_output=True, text=True, timeout=60)


def test_users_command_round_trip_in_kafkas_layout(zk, zk_connect, tmp_path):
    added = zkcoord("users", "add", "--zookeeper", zk_connect, "--user", "alice", stdin="s3cret\n")
    assert added.returncode == 0, added.stderr
    secret = tmp_path / "pw"
    write_private(secret, "other\n")
    assert zkcoord("users", "add", "--zookeeper", zk_connect, "--user", "bob", "--mechanism", "SCRAM-SHA-512",
                   "--password-file", str(secret)).returncode == 0
    node = json.loads(zk.get("/config/users/alice")[0])
    assert node["version"] == 1 and sorted(node["config"]) == ["SCRAM-SHA-256", "SCRAM-SHA-512"]
    assert "s3cret" not in json.dumps(node)
    assert node["config"]["SCRAM-SHA-256"].endswith(",iterations=4096")
    changes = [json.loads(zk.get(f"/config/changes/{c}")[0]) for c in sorted(zk.get_children("/config/changes"))]
    assert {"version": 2, "entity_path": "users/alice"} in changes
    listed = zkcoord("users", "list", "--zookeeper", zk_connect)
    assert listed.stdout.splitlines() == ["alice\tSCRAM-SHA-256,SCRAM-SHA-512", "bob\tSCRAM-SHA-512"]
    alice = store.password_credential(zk, "alice")
    assert alice.mechanism == "SCRAM-SHA-512" and scram.password_matches(alice, "s3cret")
    assert not scram.password_matches(alice, "wrong")
    assert scram.password_matches(store.password_credential(zk, "bob"), "other")
    assert zkcoord("users", "delete", "--zookeeper", zk_connect, "--user", "alice").returncode == 0
    assert not zk.exists("/config/users/alice")
    assert store.password_credential(zk, "alice") is None


@pytest.mark.parametrize("args, stdin, reason", [
    (("add", "--user", "al/ice"), "pw\n", "user name 'al/ice'"),
    (("add", "--user", "alice"), "\n", "no password"),
    (("add", "--user", "alice", "--mechanism", "SCRAM-MD5"), "pw\n", "--mechanism must be one of"),
    (("add", "--user", "alice", "--iterations", "10"), "pw\n", "iterations"),
    (("add", "--user", "alice", "--password-file", "/nonexistent/pw"), "", "cannot read the password"),
    (("delete", "--user", "nobody"), "", "has no SCRAM-SHA-256/SCRAM-SHA-512 credentials"),
])
def test_users_command_refuses_bad_input(zk, zk_connect, args, stdin, reason):
    zkcoord("users", "add", "--zookeeper", zk_connect, "--user", "keep", stdin="pw\n")
    before = zk.get("/config/users/keep")[0]
    result = zkcoord("users", args[0], "--zookeeper", zk_connect, *args[1:], stdin=stdin)
    assert result.returncode == 2, result
    assert result.stderr.startswith("zkcoord users: ") and reason in result.stderr, result.stderr
    assert zk.get("/config/users/keep")[0] == before
    assert zk.get_children("/config/users") == ["keep"]


def test_acls_command_round_trip_in_kafkas_layout(zk, zk_connect):
    ok = zkcoord("acls", "add", "--zookeeper", zk_connect, "--group", "orders", "--principal", "User:alice",
                 "--operation", "Read")
    assert ok.returncode == 0, ok.stderr
    assert zkcoord("acls", "add", "--zookeeper", zk_connect, "--topic", "t", "--principal", "User:*",
                   "--operation", "Describe", "--deny").returncode == 0
    node = json.loads(zk.get("/kafka-acl/Group/orders")[0])
    assert node == {"version": 1, "acls": [{"principal": "User:alice", "permissionType": "Allow",
                                            "operation": "Read", "host": "*"}]}
    changes = {zk.get(f"/kafka-acl-changes/{c}")[0] for c in zk.get_children("/kafka-acl-changes")}
    assert changes == {b"Group:orders", b"Topic:t"}
    listed = zkcoord("acls", "list", "--zookeeper", zk_connect).stdout
    assert "Current ACLs for resource `Group:orders`:\n\t(principal=User:alice, host=*, operation=Read, " \
           "permissionType=Allow)" in listed
    assert "permissionType=Deny" in listed
    assert zkcoord("acls", "remove", "--zookeeper", zk_connect, "--group", "orders").returncode == 0
    assert not zk.exists("/kafka-acl/Group/orders")


def test_acls_command_names_the_cluster_as_kafka_acls_does(zk, zk_connect):
    ok = zkcoord("acls", "add", "--zookeeper", zk_connect, "--cluster", "--principal", "User:alice",
                 "--operation", "IdempotentWrite", "--operation", "describeconfigs")
    assert ok.returncode == 0, ok.stderr
    node = json.loads(zk.get("/kafka-acl/Cluster/kafka-cluster")[0])
    assert [a["operation"] for a in node["acls"]] == ["DescribeConfigs", "IdempotentWrite"]
    changes = {zk.get(f"/kafka-acl-changes/{c}")[0] for c in zk.get_children("/kafka-acl-changes")}
    assert changes == {b"Cluster:kafka-cluster"}
    listed = zkcoord("acls", "list", "--zookeeper", zk_connect, "--cluster").stdout
    assert "Current ACLs for resource `Cluster:kafka-cluster`:" in listed and "IdempotentWrite" in listed
    assert zkcoord("acls", "remove", "--zookeeper", zk_connect, "--cluster", "--principal",
                   "User:alice").returncode == 0
    assert not zk.exists("/kafka-acl/Cluster/kafka-cluster")


@pytest.mark.parametrize("args, reason", [
    (("add", "--group", "g", "--principal", "alice", "--operation", "Read"), "TYPE:NAME"),
    (("add", "--topic", "t", "--principal", "User:alice", "--operation", "IdempotentWrite"),
     "a Topic ACL may name"),
    (("add", "--group", "g", "--principal", "User:alice", "--operation", "Eat"), "operation must be one of"),
    (("add", "--group", "g", "--principal", "User:alice"), "needs --principal and --operation"),
    (("add", "--group", "a/b", "--principal", "User:alice", "--operation", "Read"), "path segment"),
    (("remove", "--group", "g", "--operation", "Read"), "needs --principal"),
])
def test_acls_command_refuses_bad_input(zk, zk_connect, args, reason):
    store.add_acls(zk, acl.group("g"), [acl.AclEntry("User:keep", acl.ALLOW, acl.READ)])
    before = zk.get("/kafka-acl/Group/g")[0]
    result = zkcoord("acls", args[0], "--zookeeper", zk_connect, *args[1:])
    assert result.returncode == 2, result
    assert result.stderr.startswith("zkcoord acls: ") and reason in result.stderr, result.stderr
    assert zk.get("/kafka-acl/Group/g")[0] == before


def test_acl_cache_follows_changes(zk):
    cache = store.AclCache(zk, 60_000).start()
    try:
        assert not acl.authorize(cache.acls, user("alice"), acl.READ, acl.group("g"))
        store.add_acls(zk, acl.group("g"), [acl.AclEntry("User:alice", acl.ALLOW, acl.READ)])
        wait_until(lambda: acl.authorize(cache.acls, user("alice"), acl.READ, acl.group("g")), timeout=10,
                   message="the cache to see the new ACL")
        store.remove_acls(zk, acl.group("g"))
        wait_until(lambda: not acl.authorize(cache.acls, user("alice"), acl.READ, acl.group("g")), timeout=10,
                   message="the cache to see the ACL removed")
    finally:
        cache.stop()


def test_expired_acl_changes_are_purged_by_every_cache_reading_them(zk, caplog):
    """As Kafka's brokers: whoever reads the changes deletes those older than
    the expiry; two processes purging at once do not trip over each other."""
    expiry_ms = 300
    store.add_acls(zk, acl.group("old"), [acl.AclEntry("User:alice", acl.ALLOW, acl.READ)])
    [old] = zk.get_children("/kafka-acl-changes")
    caches = [store.AclCache(zk, expiry_ms).start() for _ in range(2)]
    try:
        # Young at start: kept. Once it is older than the expiry, the next change purges it.
        assert zk.get_children("/kafka-acl-changes") == [old]
        wait_until(lambda: time.time() * 1000 - zk.exists(f"/kafka-acl-changes/{old}").ctime > expiry_ms,
                   timeout=10, message="the first change to expire")
        store.add_acls(zk, acl.group("new"), [acl.AclEntry("User:bob", acl.ALLOW, acl.READ)])
        wait_until(lambda: old not in zk.get_children("/kafka-acl-changes"), timeout=10,
                   message="the expired change purged")
        [new] = zk.get_children("/kafka-acl-changes")
        assert zk.get(f"/kafka-acl-changes/{new}")[0] == b"Group:new"
        for cache in caches:
            wait_until(lambda: acl.authorize(cache.acls, user("bob"), acl.READ, acl.group("new")), timeout=10,
                       message="each cache to see the change")
        assert acl.authorize(caches[0].acls, user("alice"), acl.READ, acl.group("old"))  # the ACL itself stays
        assert "could not reload ACLs" not in caplog.text
    finally:
        for cache in caches:
            cache.stop()


def test_purging_keeps_young_changes_and_skips_those_already_gone(zk):
    for name in ("a", "b"):
        store.add_acls(zk, acl.group(name), [acl.AclEntry("User:alice", acl.ALLOW, acl.READ)])
    first, second = sorted(zk.get_children("/kafka-acl-changes"))
    now_ms = zk.exists(f"/kafka-acl-changes/{second}").ctime + 1
    assert store.purge_acl_changes(zk, now_ms, 60_000) == []
    zk.delete(f"/kafka-acl-changes/{first}")  # another process purged it first
    assert store.purge_acl_changes(zk, now_ms + 60_000, 60_000) == [second]
    assert zk.get_children("/kafka-acl-changes") == []


def test_expired_changes_are_those_older_than_the_expiry():
    assert store.expired_changes({"acl_changes_2": 1_000, "acl_changes_1": 500, "acl_changes_3": 1_500},
                                 2_000, 900) == ["acl_changes_1", "acl_changes_2"]


def test_credentials_unreadable_is_a_retriable_refusal(zk_connect):
    from kazoo.client import KazooClient

    client = KazooClient(hosts=zk_connect, timeout=2.0)
    client.start(timeout=15)
    store.set_user(client, "alice", "pw")
    client.stop()  # its session gone: every request now fails as one to an unreachable ZooKeeper
    try:
        with pytest.raises(store.CredentialsUnavailable) as refused:
            store.password_credential(client, "alice")
        assert refused.value.retriable and "cannot be read from ZooKeeper now" in str(refused.value)
    finally:
        client.close()
