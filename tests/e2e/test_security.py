"""Authenticated members and group ACLs on a real server: thin consumers
register with a credential (RegisterConsumer version 3) checked against the
users in ZooKeeper and fetch over SASL with it; stock Kafka clients
authenticate to the broker with SASL and join through its group bridge,
which registers them on behalf of their principal; the authorizer decides
from the ACLs in ZooKeeper; a static id stays its principal's; and every
refusal reaches the application (poll() raises the typed error; a stock
client reports Kafka's)."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import Consumer as KafkaConsumer, KafkaError, KafkaException
from kafka import KafkaConsumer as PythonConsumer

from tests.e2e.checks import produce
from tests.e2e.conftest import SERVER_ARGS
from zkcoord import wire
from zkcoord.consumer.consumer import Consumer
from zkcoord.security import acl
from zkcoord.security.secrets import write_private
from zkcoord.testing.waiting import wait_until
from zkcoord.zk import security_store as store

TOPIC = "events"
PARTITIONS = 2


MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


@pytest.fixture(scope="module")
def secured(zk_ensemble, tmp_path_factory):
    """One server with the authorizer on and SASL on its broker; alice may
    read groups g and g-stock-* and the topic, carol only group g (and
    describe g-reset), bob
    nothing but describe the topic; admin and the broker's own user are
    super users; the test's producer (anonymous) may describe and write the
    topic, not read it."""
    from zkcoord.testing import LocalCluster, fresh_chroot

    directory = tmp_path_factory.mktemp("secured")
    bridge_password = directory / "bridge-password"
    write_private(bridge_password, "broker-pw\n")
    with fresh_chroot(zk_ensemble.connect_string, "sec") as (connect, zk):
        for name in ("alice", "bob", "carol", "mallory", "admin", "broker"):
            store.set_user(zk, name, f"{name}-pw")
        for who in ("alice", "carol", "mallory"):
            store.add_acls(zk, acl.group("g"), [acl.AclEntry(f"User:{who}", acl.ALLOW, acl.READ)])
        for stock_group in ("g-stock-1", "g-stock-2", "g-stock-3", "g-stock-java"):  # one a test: each commits all it reads
            store.add_acls(zk, acl.group(stock_group), [acl.AclEntry("User:alice", acl.ALLOW, acl.READ)])
        for who in ("alice", "mallory"):
            store.add_acls(zk, acl.topic(TOPIC), [acl.AclEntry(f"User:{who}", acl.ALLOW, acl.READ)])
        store.add_acls(zk, acl.group("g-reset"), [acl.AclEntry("User:carol", acl.ALLOW, acl.DESCRIBE)])
        store.add_acls(zk, acl.group("g-cli"), [acl.AclEntry("User:alice", acl.ALLOW, acl.READ)])
        store.add_acls(zk, acl.group("g-admin"), [acl.AclEntry("User:alice", acl.ALLOW, acl.READ)])
        for who in ("ANONYMOUS", "bob", "carol"):  # carol: an operator looks at log ends as herself
            store.add_acls(zk, acl.topic(TOPIC), [acl.AclEntry(f"User:{who}", acl.ALLOW, acl.DESCRIBE)])
        store.add_acls(zk, acl.topic(TOPIC), [acl.AclEntry("User:ANONYMOUS", acl.ALLOW, acl.WRITE)])
        args = SERVER_ARGS + ("--authorizer", "on", "--super-user", "User:admin", "--super-user", "User:broker",
                              "--bridge-user", "broker", "--bridge-password-file", str(bridge_password),
                              "--bridge-password-without-tls",
                              *[a for m in MECHANISMS for a in ("--sasl-mechanism", m)])
        with LocalCluster(connect, directory, args) as cluster:
            cluster.start_servers(1)
            cluster.create_topic(TOPIC, PARTITIONS)
            produce(cluster, TOPIC, 40, partitions=PARTITIONS)
            yield cluster


def member(cluster, name, password=None, **settings):
    """A thin consumer of the topic in group g, as ``name`` (None: anonymous)."""
    settings.setdefault("session_timeout_ms", 6000)
    settings.setdefault("group", "g")
    # This cluster speaks no TLS (test_tls.py and test_secured_deployment.py do).
    credential = {} if name is None else {"user": name, "password": password or f"{name}-pw",
                                          "password_without_tls": True}
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


def test_only_a_super_user_registers_on_behalf_of_another(secured):
    with member(secured, "alice", on_behalf_of="User:admin", group="g-admin") as claiming:
        exc = refusal(claiming)
        assert isinstance(exc, wire.AuthenticationFailed), exc
        assert "User:alice may not register on behalf of User:admin" in str(exc)


def test_a_server_requiring_authentication_refuses_an_anonymous_member(cluster_factory, zk, tmp_path):
    store.set_user(zk, "alice", "alice-pw")
    store.set_user(zk, "broker", "broker-pw")
    secret = tmp_path / "broker-pw"
    write_private(secret, "broker-pw\n")
    cluster = cluster_factory(1, server_args=SERVER_ARGS + ("--authentication-required", "--super-user", "User:broker",
                                                            "--bridge-user", "broker", "--bridge-password-file",
                                                            str(secret), "--bridge-password-without-tls"))
    with member(cluster, None) as anonymous:
        exc = refusal(anonymous)
    assert isinstance(exc, wire.AuthenticationFailed), exc
    assert "authentication is required: RegisterConsumerRequest must carry a credential" in str(exc)
    cluster.create_topic(TOPIC, 1)
    with member(cluster, "alice") as alice:  # and registers one that has a credential
        wait_until(lambda: alice.poll(100) is not None and alice.assignment(), timeout=30,
                   message="alice to register and get the partition")


def test_consume_with_a_credential_reads_the_topic(secured, tmp_path):
    import json
    import subprocess
    import sys

    secret = tmp_path / "alice-pw"
    write_private(secret, "alice-pw\n")
    out = tmp_path / "records.jsonl"
    done = subprocess.run([sys.executable, "-m", "zkcoord.cli", "consume", "--bootstrap", ",".join(secured.bootstrap),
                           "--topic", TOPIC, "--group", "g-cli", "--user", "alice", "--password-file", str(secret),
                           "--password-without-tls", "--max-messages", "40", "--output", str(out)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    values = sorted(json.loads(line)["value"] for line in out.read_text().splitlines())
    assert values == sorted(f"m-{n}" for n in range(40))


def test_consume_takes_the_password_from_a_file_or_the_environment_only(tmp_path):
    import os
    import subprocess
    import sys

    def consume(*args, env=None):
        return subprocess.run([sys.executable, "-m", "zkcoord.cli", "consume", "--bootstrap", "127.0.0.1:1",
                               "--topic", "t", "--group", "g", *args], capture_output=True, text=True, timeout=60,
                              env={k: v for k, v in os.environ.items() if k != "ZKCOORD_PASSWORD"} | (env or {}))
    missing = consume("--user", "alice")
    assert missing.returncode == 2 and "--user alice needs a password: --password-file PATH or $ZKCOORD_PASSWORD" \
        in missing.stderr, missing.stderr
    empty = tmp_path / "empty"
    write_private(empty, "\n")
    refused = consume("--user", "alice", "--password-file", str(empty))
    assert refused.returncode == 2 and "no password: the first line of" in refused.stderr, refused.stderr
    orphan = consume("--password-file", str(empty))
    assert orphan.returncode == 2 and "--password-file without --user" in orphan.stderr, orphan.stderr


def test_an_offset_reset_asks_describe_to_look_and_delete_to_execute(secured, tmp_path):
    import subprocess
    import sys

    def reset(user, *args):
        secret = tmp_path / f"{user}-pw"
        write_private(secret, f"{user}-pw\n")
        return subprocess.run([sys.executable, "-m", "zkcoord.cli", "groups", "reset-offsets", "--bootstrap",
                               ",".join(secured.bootstrap), "--group", "g-reset", "--topic", TOPIC, "--to-earliest",
                               "--user", user, "--password-file", str(secret), "--password-without-tls", *args],
                              capture_output=True, text=True, timeout=60)
    looked = reset("carol")
    assert looked.returncode == 0, looked.stderr
    refused = reset("carol", "--execute")
    assert refused.returncode == 1
    assert "GroupAuthorizationFailed: User:carol is not authorized to Delete group 'g-reset'" in refused.stderr
    wrong = reset("bob")  # bob has no ACL on g-reset at all
    assert wrong.returncode == 1 and "User:bob is not authorized to Describe group 'g-reset'" in wrong.stderr
    done = reset("admin", "--execute")
    assert done.returncode == 0, done.stderr


def test_a_look_at_a_groups_members_asks_describe_on_the_group(secured):
    """DescribeGroup (`groups describe --members`, the console) through the authorizer of a real server."""
    from zkcoord.admin.live import LiveUnavailable, live_members

    looked = live_members(secured.zk, "g-reset", credential=("carol", "carol-pw"))
    assert looked.error_code == wire.ErrorCode.NONE and looked.members == ()  # nobody consumes g-reset
    with pytest.raises(LiveUnavailable, match="User:bob is not authorized to Describe group 'g-reset'"):
        live_members(secured.zk, "g-reset", credential=("bob", "bob-pw"))
    with pytest.raises(LiveUnavailable, match="AuthenticationFailed"):
        live_members(secured.zk, "g-reset", credential=("carol", "wrong"))


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


def test_an_anonymous_fetch_of_a_protected_topic_is_refused(secured):
    from zkcoord.fetch.connection import BrokerConnection, PartitionError

    with BrokerConnection(secured.broker_list) as anonymous:
        assert anonymous.list_offset(TOPIC, 0, -2) == 0  # it may Describe the topic
        with pytest.raises(PartitionError) as refused:
            anonymous.fetch(TOPIC, 0, 0, max_wait_ms=0, partition_max_bytes=1 << 20)
    assert refused.value.code == 29  # TOPIC_AUTHORIZATION_FAILED
    with BrokerConnection(secured.broker_list, credential=("alice", "alice-pw")) as alice:
        assert alice.fetch(TOPIC, 0, 0, max_wait_ms=0, partition_max_bytes=1 << 20)


def test_a_produce_without_write_is_refused(secured):
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": secured.broker_list, "security.protocol": "SASL_PLAINTEXT",
                         "sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": "alice-pw"})
    failures = []
    producer.produce(TOPIC, value=b"not alice's to write", partition=0,
                     on_delivery=lambda err, _msg: failures.append(err))
    producer.flush(20)
    assert [e.code() for e in failures] == [KafkaError.TOPIC_AUTHORIZATION_FAILED], failures


class StockMember:
    """A stock client in a group over SASL, polled on its own thread."""

    def __init__(self, consumer, poll):
        self.consumer, self._poll = consumer, poll
        self.values, self.errors = [], []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            try:
                self._poll(self)
            except Exception as exc:  # kafka-python raises the group's refusal from poll()
                self.errors.append(exc)
                self._stop.wait(0.2)

    def close(self):
        self._stop.set()
        self._thread.join(10)
        self.consumer.close()


def confluent_member(cluster, user, mechanism, group="g-stock"):
    consumer = KafkaConsumer({
        "bootstrap.servers": cluster.broker_list, "group.id": group, "auto.offset.reset": "earliest",
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism, "sasl.username": user,
        "sasl.password": f"{user}-pw", "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
    consumer.subscribe([TOPIC])

    def poll(member):
        message = consumer.poll(0.1)
        if message is None:
            return
        if message.error():
            member.errors.append(message.error())
        else:
            member.values.append(message.value())
    return StockMember(consumer, poll)


def python_member(cluster, user, mechanism, group="g-stock"):
    consumer = PythonConsumer(
        bootstrap_servers=cluster.broker_list, group_id=group, auto_offset_reset="earliest",
        security_protocol="SASL_PLAINTEXT", sasl_mechanism=mechanism, sasl_plain_username=user,
        sasl_plain_password=f"{user}-pw", session_timeout_ms=6000, heartbeat_interval_ms=500)
    consumer.subscribe([TOPIC])

    def poll(member):
        for records in consumer.poll(timeout_ms=100).values():
            member.values.extend(r.value for r in records)
    return StockMember(consumer, poll)


@pytest.mark.parametrize("make, mechanism, group", [(confluent_member, "SCRAM-SHA-256", "g-stock-1"),
                                                    (python_member, "PLAIN", "g-stock-2"),
                                                    (confluent_member, "SCRAM-SHA-512", "g-stock-3")])
def test_stock_clients_authenticate_join_and_consume(secured, make, mechanism, group):
    stock = make(secured, "alice", mechanism, group)
    try:
        wait_until(lambda: len(stock.values) >= 40, timeout=40, message="the stock member to read the topic")
        assert sorted(stock.values)[:40] == sorted(f"m-{n}".encode() for n in range(40))
        assert not stock.errors
    finally:
        stock.close()


def test_a_stock_client_without_read_on_the_group_is_refused(secured):
    confluent = confluent_member(secured, "bob", "SCRAM-SHA-256")
    python = python_member(secured, "bob", "PLAIN")
    try:
        wait_until(lambda: confluent.errors and python.errors, timeout=30, message="both clients' refusals")
        assert {e.code() for e in confluent.errors} == {KafkaError.GROUP_AUTHORIZATION_FAILED}, confluent.errors
        assert "GroupAuthorizationFailed" in type(python.errors[0]).__name__, python.errors
        assert not confluent.values and not python.values
    finally:
        confluent.close()
        python.close()


def test_the_java_client_authenticates_and_consumes_or_is_refused_the_group(secured, tmp_path):
    """Kafka's own KafkaConsumer over SASL: alice joins and reads; bob, with
    no READ on the group, gets GroupAuthorizationException from poll under
    either group protocol."""
    from zkcoord.testing.java_members import JavaMembers

    def java(name, user, mechanism, group, **settings):
        return JavaMembers(tmp_path / name, [TOPIC], {
            "bootstrap.servers": secured.broker_list, "group.id": group, "auto.offset.reset": "earliest",
            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
            "sasl.jaas.config": f'{_JAAS_MODULES[mechanism]} required username="{user}" password="{user}-pw";',
            **settings}).start(wait=False)

    classic = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500}
    drivers = [java("alice", "alice", "SCRAM-SHA-512", "g-stock-java", **classic),
               java("bob-classic", "bob", "PLAIN", "g-stock-java", **classic),
               java("bob-consumer", "bob", "SCRAM-SHA-256", "g-stock-java", **{"group.protocol": "consumer"})]
    try:
        alice, *bobs = drivers
        alice.wait_for(lambda: len(alice.records()) >= 40, 60, "alice's Java member to read the topic")
        assert sorted(alice.records()) == sorted((TOPIC, p, o) for p in range(PARTITIONS) for o in range(20))
        assert alice.errors() == []
        for bob in bobs:
            errors = bob.wait_for(lambda: bob.errors(0), 60, "bob's refusal")
            assert errors[0]["class"] == "org.apache.kafka.common.errors.GroupAuthorizationException", errors
            assert bob.records() == []
    finally:
        for driver in drivers:
            driver.stop()


_JAAS_MODULES = {"PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
                 "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
                 "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule"}


def test_a_server_requiring_authentication_without_a_credential_of_its_own_refuses_to_start(zk_connect, tmp_path):
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "zkcoord.cli", "server", "--id", "1", "--zookeeper", zk_connect,
                           "--port", "0", "--broker-port", "0", "--data-dir", str(tmp_path),
                           "--authentication-required"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "--authentication-required needs the server's own credential: --bridge-user" in done.stderr


def test_create_topics_asks_create_and_refuses_a_partition_count_that_would_hold_the_server(secured):
    # Review finding: CreateTopics was asked no ACL, and planned up to 2**31 - 1
    # partitions on the broker's event loop, even to validate only.
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    def create(user, topic, partitions):
        admin = AdminClient({"bootstrap.servers": secured.broker_list, "security.protocol": "SASL_PLAINTEXT",
                             "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": user,
                             "sasl.password": f"{user}-pw"})
        future = admin.create_topics([NewTopic(topic, partitions, 1)], request_timeout=20)[topic]
        try:
            future.result(timeout=30)
            return None
        except KafkaException as exc:
            return exc.args[0]

    refused = create("alice", "alice-new", 1)
    assert refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert "User:alice is not authorized to Create topic 'alice-new'" in refused.str()
    assert create("admin", "admin-new", 2) is None
    # librdkafka refuses above 100,000 itself; kafka-python sends what it is given.
    from kafka.admin import KafkaAdminClient, NewTopic as PythonNewTopic
    from kafka.errors import InvalidPartitionsError

    admin = KafkaAdminClient(bootstrap_servers=secured.broker_list, security_protocol="SASL_PLAINTEXT",
                             sasl_mechanism="PLAIN", sasl_plain_username="admin", sasl_plain_password="admin-pw")
    try:
        started = time.monotonic()
        with pytest.raises(InvalidPartitionsError):
            admin.create_topics([PythonNewTopic("huge", 2**31 - 1, 1)], validate_only=True)
        assert time.monotonic() - started < 10
    finally:
        admin.close()


def test_a_commit_from_outside_the_group_asks_read_and_goes_through_the_coordinator(secured):
    """An admin client's alterConsumerGroupOffsets (kafka-consumer-groups
    --reset-offsets): Read on the group, as Kafka asks, then an offset reset
    the broker sends the coordinator with its own credential."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    from zkcoord.zk.nodes import read_offsets

    def alter(user: str) -> list:
        admin = AdminClient({"bootstrap.servers": secured.broker_list, "security.protocol": "SASL_PLAINTEXT",
                             "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": user, "sasl.password": f"{user}-pw"})
        future = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions("g-admin", [
            TopicPartition(TOPIC, 0, 5)])])["g-admin"]
        try:
            return [tp.error for tp in future.result(timeout=30).topic_partitions]
        except KafkaException as exc:
            return [exc.args[0]]

    (refused,) = alter("bob")  # no ACL on g-admin
    assert refused is not None and refused.code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    assert read_offsets(secured.zk, "g-admin") == {}
    assert alter("alice") == [None]
    assert read_offsets(secured.zk, "g-admin") == {(TOPIC, 0): 5}
