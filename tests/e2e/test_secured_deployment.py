"""A secured deployment end to end, as deploy/ and the README set it up:
ZooKeeper with SASL users and a TLS-only client port; a zkcoord server whose
coordinator protocol and broker speak TLS only, whose broker requires SASL
and whose authorizer is on; one group of a thin consumer (TLS and a
credential) and a stock client (SASL_SSL, SCRAM-SHA-512) consuming exactly
once, and a stranger refused on each path. Every layer is real."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from confluent_kafka import KafkaError

from tests.e2e.checks import produce
from tests.e2e.conftest import SERVER_ARGS
from tests.e2e.test_security import StockMember, refusal
from zkcoord import wire
from zkcoord.consumer.consumer import Consumer
from zkcoord.security import acl, certs
from zkcoord.security.config import TlsConfig, librdkafka_settings
from zkcoord.security.secrets import write_private
from zkcoord.testing import LocalCluster, wait_until
from zkcoord.zk import security_store as store
from zkcoord.zk import layout
from zkcoord.zk.ensemble import LocalEnsemble

TOPIC = "secure-events"
PARTITIONS = 4
RECORDS = 200


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    directory = tmp_path_factory.mktemp("secured-deployment")
    ensemble = LocalEnsemble.create(directory / "zk", nodes=1, tick_ms=250, auth="sasl", users=("zkcoord",), tls=True)
    ensemble.start(timeout=60)
    try:
        ca = certs.make_ca(directory / "pki")
        server = certs.issue(ca, directory / "pki", "server")
        bridge_password = directory / "bridge-password"
        write_private(bridge_password, "broker-pw\n")
        args = (*SERVER_ARGS, "--tls-cert", str(server.cert), "--tls-key", str(server.key), "--tls-ca", str(ca.cert),
                "--authentication-required", "--authorizer", "on", "--sasl-mechanism", "SCRAM-SHA-512",
                "--super-user", "User:admin", "--super-user", "User:broker",
                "--bridge-user", "broker", "--bridge-password-file", str(bridge_password))
        with LocalCluster(ensemble.connect_string, directory / "cluster", args,
                          zk_security=ensemble.client_security()) as cluster:
            for name in ("alice", "bob", "admin", "broker"):
                store.set_user(cluster.zk, name, f"{name}-pw")
            store.add_acls(cluster.zk, acl.group("secure"), [acl.AclEntry("User:alice", acl.ALLOW, acl.READ)])
            store.add_acls(cluster.zk, acl.topic(TOPIC), [acl.AclEntry("User:alice", acl.ALLOW, acl.READ),
                                                          acl.AclEntry("User:bob", acl.ALLOW, acl.DESCRIBE)])
            cluster.tls = TlsConfig(ca=str(ca.cert))
            cluster.client_settings = sasl_ssl(cluster, "admin")  # the test's producer is a super user
            cluster.start_servers(1)
            cluster.create_topic(TOPIC, PARTITIONS)
            produce(cluster, TOPIC, RECORDS, partitions=PARTITIONS)
            yield cluster
    finally:
        ensemble.destroy()


def sasl_ssl(cluster, user: str) -> dict[str, str]:
    return {**librdkafka_settings(cluster.tls), "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": user, "sasl.password": f"{user}-pw"}


def stock_member(cluster, user: str, group: str = "secure") -> StockMember:
    from confluent_kafka import Consumer as KafkaConsumer

    consumer = KafkaConsumer({"bootstrap.servers": cluster.broker_list, "group.id": group,
                              "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                              "heartbeat.interval.ms": 500, **sasl_ssl(cluster, user)})
    consumer.subscribe([TOPIC])

    def poll(member):
        message = consumer.poll(0.1)
        if message is not None:
            (member.errors if message.error() else member.values).append(message.error() or message.value())
    return StockMember(consumer, poll)


def test_the_broker_registers_a_sasl_ssl_listener(deployment):
    registration = json.loads(deployment.zk.get(layout.broker_path(1))[0])
    port = deployment.servers[1].broker_port
    assert registration["endpoints"] == [f"SASL_SSL://127.0.0.1:{port}"]
    assert registration["listener_security_protocol_map"] == {"SASL_SSL": "SASL_SSL"}


def test_a_thin_and_a_stock_member_share_the_group_exactly_once(deployment):
    thin_values = []
    with Consumer(deployment.bootstrap, group="secure", topics=[TOPIC], user="alice", password="alice-pw",
                  tls=deployment.tls, auto_offset_reset="smallest", session_timeout_ms=6000) as thin:
        stock = stock_member(deployment, "alice")
        try:
            def both_served():
                thin_values.extend(r.value for r in thin.poll(100))
                return len(thin_values) + len(stock.values) >= RECORDS and thin.assignment()
            wait_until(both_served, timeout=60, message=f"{RECORDS} records between the two, both assigned")
            assert stock.errors == []
        finally:
            stock.close()
        for _ in range(5):  # any duplicate would follow the stock member's leave
            thin_values.extend(r.value for r in thin.poll(100))
    delivered = Counter(thin_values + stock.values)
    assert [v for v, n in delivered.items() if n > 1] == []
    assert sorted(delivered) == sorted(f"m-{n}".encode() for n in range(RECORDS))


def test_zkcoord_consume_as_a_stock_member_logs_in_with_its_user(deployment, tmp_path):
    """`zkcoord consume --kafka-brokers --user` speaks SASL_SSL with SCRAM as
    that user (a broker requiring authentication answers nothing else)."""
    store.add_acls(deployment.zk, acl.group("secure-cli"), [acl.AclEntry("User:alice", acl.ALLOW, acl.READ)])
    secret = tmp_path / "alice-pw"
    write_private(secret, "alice-pw\n")
    member = deployment.add_consumer("secure-cli", [TOPIC], kafka_brokers=deployment.broker_list, extra=[
        "--tls-ca", deployment.tls.ca, "--user", "alice", "--password-file", str(secret)])
    try:
        wait_until(lambda: len(member.records()) >= RECORDS, timeout=60,
                   message=f"{RECORDS} records read by the stock member")
    finally:
        member.terminate()
    assert "SASL" not in member.log_tail(), member.log_tail()  # no authentication error on the way
    assert sorted(r["value"] for r in member.records()) == sorted(f"m-{n}" for n in range(RECORDS))


def test_a_stranger_is_refused_on_every_path(deployment):
    with Consumer(deployment.bootstrap, group="secure", topics=[TOPIC], user="bob", password="bob-pw",
                  tls=deployment.tls, session_timeout_ms=6000) as bob:
        exc = refusal(bob)
    assert isinstance(exc, wire.GroupAuthorizationFailed) and "User:bob is not authorized to Read group" in str(exc)
    with Consumer(deployment.bootstrap, group="secure", topics=[TOPIC], tls=deployment.tls,
                  session_timeout_ms=6000) as anonymous:
        exc = refusal(anonymous)
    assert isinstance(exc, wire.AuthenticationFailed) and "authentication is required" in str(exc)
    stock = stock_member(deployment, "bob")
    try:
        wait_until(lambda: stock.errors, timeout=30, message="bob's stock client to be refused")
    finally:
        stock.close()
    assert stock.errors[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED and stock.values == []


def test_the_operator_commands_reach_the_secured_cluster(deployment, tmp_path):
    """What the README's secured deployment runs: users and ACLs written with
    ZooKeeper credentials, a group described with its lag (the brokers asked
    over TLS as a SASL user), each refused without what it needs."""
    import subprocess

    from zkcoord.testing import zkcoord_command
    from zkcoord.zk.security import command_line

    zk = ("--zookeeper", deployment.zookeeper, *command_line(deployment.zk_security))
    secret = tmp_path / "pw"

    def zkcoord(*args):
        return subprocess.run(zkcoord_command(*args), capture_output=True, text=True, timeout=60)

    write_private(secret, "dave-pw\n")
    assert zkcoord("users", "add", *zk, "--user", "dave", "--password-file", str(secret)).returncode == 0
    added = zkcoord("acls", "add", *zk, "--group", "secure", "--principal", "User:dave", "--operation", "Describe")
    assert added.returncode == 0, added.stderr
    assert "User:dave" in zkcoord("acls", "list", *zk, "--group", "secure").stdout
    anonymous = zkcoord("users", "add", "--zookeeper", deployment.zookeeper, "--zk-ca-file",
                        str(deployment.zk_security.zk_ca_file), "--user", "eve", "--password-file", str(secret))
    assert anonymous.returncode != 0, anonymous.stderr
    assert "ZooKeeper closed the session: it requires every session to authenticate" in anonymous.stderr, \
        anonymous.stderr

    write_private(secret, "admin-pw\n")
    client = ("--tls-ca", deployment.tls.ca, "--user", "admin", "--password-file", str(secret))
    described = zkcoord("groups", "describe", *zk, "--group", "secure", "--output", "json", *client)
    assert described.returncode == 0, described.stderr
    view = json.loads(described.stdout)
    assert view["partitions"] and all(row["log_end_offset"] is not None for row in view["partitions"]), view
