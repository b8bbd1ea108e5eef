"""zkcoord against a secured Kafka: Kafka 4 in KRaft mode and Kafka 3.9 in
ZooKeeper mode, each with a SASL_SSL listener for clients beside the
harness's PLAINTEXT one, SCRAM users, certificates from zkcoord's own CA,
and Kafka's authorizer enforcing ACLs. A thin consumer of a zkcoord group
reads with its user; a user without a READ ACL on the topic gets a typed
authorization error, shown by ``zkcoord consume``; ``zkcoord groups
describe`` reads the lag with credentials, and says so when they are
refused; the Spark source reads with credentials on both its paths. In
KRaft mode zkcoord is given the SASL_SSL listener (``--kafka-bootstrap``);
in ZooKeeper mode it reads the brokers' registrations and takes the
endpoint that speaks what it speaks (SASL_SSL, with TLS and a login), not
the PLAINTEXT one. One Kafka node and one zkcoord server serve each mode."""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from typing import Iterator

import pytest

from tests.spark.conftest import spark  # noqa: F401 - the run's one SparkSession
from zkcoord.consumer.consumer import Consumer
from zkcoord.fetch.errors import TopicAuthorizationError
from zkcoord.security import certs
from zkcoord.security.secrets import write_private
from zkcoord.testing import LocalCluster, cluster_in_chroot, wait_until
from zkcoord.testing.kafka import KRAFT_MODE, ZOOKEEPER_MODE, KafkaSettings
from zkcoord.testing.kafka_security import SecuredKafkaCluster
from zkcoord.testing.process import zkcoord_command
from zkcoord.zk import security_store as store
from zkcoord.zk.nodes import read_offsets

pytestmark = pytest.mark.kafka

TOPIC = "guarded"
PARTITIONS = 2
RECORDS = 60
USERS = {"alice": "alice-pw", "mallory": "mallory-pw", "zkcoord": "zkcoord-pw"}


@pytest.fixture(scope="module", params=[KRAFT_MODE, ZOOKEEPER_MODE])
def kafka(request, kafka_chroot, tmp_path_factory) -> Iterator[SecuredKafkaCluster]:
    # One node: what is tested is who may log in and read, not replication
    # (the other modules' clusters have three), and one JVM starts soonest.
    settings = KafkaSettings(request.param, brokers=1, min_insync_replicas=1)
    zookeeper = kafka_chroot[0] if request.param == ZOOKEEPER_MODE else None  # the chroot zkcoord shares
    with SecuredKafkaCluster(tmp_path_factory.mktemp("kafka-secured"), settings, zookeeper) as cluster:
        cluster.start()
        cluster.add_users(USERS)
        cluster.allow("User:alice", ["READ"], TOPIC)
        cluster.allow("User:zkcoord", ["DESCRIBE"])  # every topic: the server learns them and reads their ends
        cluster.create_topic(TOPIC, partitions=PARTITIONS)
        cluster.produce(TOPIC, [(p, b"k", f"v-{p}-{i}".encode()) for p in range(PARTITIONS)
                                for i in range(RECORDS // PARTITIONS)])
        yield cluster


@pytest.fixture(scope="module")
def secrets(tmp_path_factory):
    """Each user's password in a file of its own, as the commands read it."""
    directory = tmp_path_factory.mktemp("secrets")
    for user, password in USERS.items():
        write_private(directory / user, password + "\n")
    return directory


def kafka_at(kafka) -> tuple[str, ...]:
    """How a command is told where Kafka is: KRaft, its SASL_SSL listener;
    ZooKeeper mode, nothing (the brokers' registrations in the chroot)."""
    return ("--kafka-bootstrap", kafka.secure_bootstrap) if kafka.mode == KRAFT_MODE else ()


@pytest.fixture(scope="module")
def zkcoord_server(kafka, kafka_chroot, secrets, zk_ensemble, tmp_path_factory) -> Iterator[LocalCluster]:
    """A zkcoord server beside the Kafka cluster (no broker of its own): TLS
    from the same CA, and its own SCRAM user for Kafka's Metadata and log ends."""
    pki = kafka.tls.authority
    server = certs.issue(pki, kafka.directory / "pki", "zkcoord-server")
    directory = tmp_path_factory.mktemp("zkcoord")
    with (cluster_in_chroot(zk_ensemble.connect_string, directory, "secure-kraft") if kafka.mode == KRAFT_MODE
          else LocalCluster(kafka_chroot[0], directory)) as zkc:
        for user, password in USERS.items():
            store.set_user(zkc.zk, user, password)  # the members' credentials serve the coordinator too
        zkc.add_server(1, extra=("--no-broker", *kafka_at(kafka),
                                 "--kafka-metadata-interval-ms", "2000", "--initial-rebalance-delay-ms", "0",
                                 "--tls-cert", str(server.cert), "--tls-key", str(server.key),
                                 "--tls-ca", str(pki.cert), "--bridge-user", "zkcoord",
                                 "--bridge-password-file", str(secrets / "zkcoord")))
        zkc.wait_for_coordinator()
        yield zkc


def thin_consumer(kafka, zkcoord_server, group: str, user: str) -> Consumer:
    return Consumer(zkcoord_server.bootstrap, group=group, topics=[TOPIC], user=user, password=USERS[user],
                    tls=kafka.tls.client, auto_offset_reset="smallest", session_timeout_ms=6000)


def zkcoord_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(zkcoord_command(*args), capture_output=True, text=True, timeout=60)


def test_a_thin_consumer_reads_the_secured_cluster_with_its_scram_user(kafka, zkcoord_server):
    delivered: list[bytes] = []
    with thin_consumer(kafka, zkcoord_server, "guards", "alice") as consumer:
        def read_everything() -> bool:
            delivered.extend(record.value for record in consumer.poll(100))
            return len(delivered) >= RECORDS
        wait_until(read_everything, 60, message=f"{RECORDS} records over SASL_SSL")
    assert sorted(Counter(delivered).items()) == sorted(
        Counter(f"v-{p}-{i}".encode() for p in range(PARTITIONS) for i in range(RECORDS // PARTITIONS)).items())


def test_a_user_without_a_read_acl_gets_a_typed_authorization_error(kafka, zkcoord_server):
    with thin_consumer(kafka, zkcoord_server, "intruders", "mallory") as consumer:
        with pytest.raises(TopicAuthorizationError, match=f"the brokers refuse User:mallory the topic .*"
                                                          f"TOPIC_AUTHORIZATION_FAILED.*READ topic {TOPIC} is missing"):
            wait_until(lambda: consumer.poll(100) and False, 60, fail_on=(TopicAuthorizationError,),
                       message="the refusal")


def test_zkcoord_consume_shows_the_authorization_error_and_stops(kafka, zkcoord_server, secrets):
    member = zkcoord_server.add_consumer("intruders-cli", topics=[TOPIC], extra=(
        "--tls-ca", str(kafka.tls.ca), "--user", "mallory", "--password-file", str(secrets / "mallory")))
    wait_until(lambda: not member.alive, 60, message="the member to stop")
    assert member.returncode != 0
    assert f"zkcoord: error: {TOPIC}-" in member.log_tail()
    assert "the brokers refuse User:mallory the topic" in member.log_tail()


def test_groups_describe_reads_the_lag_with_credentials_and_says_when_they_are_refused(kafka, zkcoord_server,
                                                                                      secrets, tmp_path):
    group = "lagging-guards"
    with thin_consumer(kafka, zkcoord_server, group, "alice") as consumer:
        wait_until(lambda: consumer.poll(100) and not consumer.poll(100) and consumer.assignment(), 60,
                   message="a first read")
    committed = wait_until(lambda: read_offsets(zkcoord_server.zk, group), 30, message="the offsets committed")
    where = ("groups", "describe", "--zookeeper", zkcoord_server.zookeeper, "--group", group, *kafka_at(kafka),
             "--tls-ca", str(kafka.tls.ca), "--user", "alice")
    done = zkcoord_cli(*where, "--password-file", str(secrets / "alice"), "--json")
    assert done.returncode == 0, done.stderr
    rows = {(row["topic"], row["partition"]): row for row in json.loads(done.stdout)["partitions"]}
    for (topic, partition), offset in committed.items():
        row = rows[(topic, partition)]
        assert (row["current_offset"], row["log_end_offset"], row["lag"]) == (
            offset, RECORDS // PARTITIONS, RECORDS // PARTITIONS - offset)

    wrong = tmp_path / "wrong"
    write_private(wrong, "not-alices-password\n")
    refused = zkcoord_cli(*where, "--password-file", str(wrong))
    assert refused.returncode == 1
    assert "zkcoord groups: broker 127.0.0.1:" in refused.stderr and "refused user 'alice'" in refused.stderr, \
        refused.stderr


def test_the_spark_source_reads_with_credentials_on_both_paths(kafka, zkcoord_server, secrets, spark):
    from zkcoord.spark import PYTHON_SOURCE_NAME

    wanted = sorted(f"v-{p}-{i}".encode() for p in range(PARTITIONS) for i in range(RECORDS // PARTITIONS))

    def read(source: str, user: str):
        reader = spark.read.format(source).option("zookeeper", zkcoord_server.zookeeper)
        if kafka.mode == KRAFT_MODE:
            reader = reader.option("kafka.bootstrap.servers", kafka.secure_bootstrap)
        return (reader.option("subscribe", TOPIC)
                .option("ssl.ca.location", str(kafka.tls.ca)).option("sasl.username", user)
                .option("sasl.passwordFile", str(secrets / user)).load().select("value").collect())

    for source in ("zkcoord", PYTHON_SOURCE_NAME):  # the JVM reader, the Python reader
        assert sorted(bytes(row.value) for row in read(source, "alice")) == wanted, source
        # Named by the subscription, a topic the brokers will not describe is an
        # error, not a topic that is not there (an empty read).
        with pytest.raises(Exception, match=f"User:mallory is not authorized to Describe topic '{TOPIC}'"):
            read(source, "mallory")
