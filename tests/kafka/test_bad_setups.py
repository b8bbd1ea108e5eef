"""Bad setups get clear, typed errors on every path a user takes: a Kafka
too old for zkcoord's client (a real Apache Kafka 0.10.2 broker, in
ZooKeeper mode in the module's chroot), and a Kafka that cannot be reached.
The old broker and one zkcoord server beside it serve the whole module."""

from __future__ import annotations

import subprocess
from typing import Iterator

import pytest

from tests.e2e.conftest import SERVER_ARGS
from zkcoord.fetch.connection import BrokerConnection, BrokerTooOld
from zkcoord.testing import LocalCluster, wait_until
from zkcoord.testing.kafka import TOO_OLD_LINE, ZOOKEEPER_MODE, KafkaCluster, KafkaSettings
from zkcoord.testing.process import zkcoord_command
from zkcoord.zk import layout
from zkcoord.zk.layout.consumers import encode_offset

pytestmark = pytest.mark.kafka

TOO_OLD = "offers Fetch versions 0..3; this client speaks 4..12: a Kafka too old for this client, " \
          "which needs Kafka 0.11 or later"


@pytest.fixture(scope="module")
def old_kafka(kafka_chroot, tmp_path_factory) -> Iterator[KafkaCluster]:
    settings = KafkaSettings(ZOOKEEPER_MODE, brokers=1, min_insync_replicas=1, release_line=TOO_OLD_LINE)
    with KafkaCluster(tmp_path_factory.mktemp("kafka-old"), settings, zookeeper=kafka_chroot[0]) as cluster:
        yield cluster.start()


@pytest.fixture(scope="module")
def cluster(old_kafka, kafka_chroot, tmp_path_factory) -> Iterator[LocalCluster]:
    """A zkcoord server without a broker, in the old Kafka's chroot."""
    with LocalCluster(kafka_chroot[0], tmp_path_factory.mktemp("zkcoord"), ("--no-broker", *SERVER_ARGS)) as zkc:
        zkc.start_servers(1)
        yield zkc


def zkcoord_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(zkcoord_command(*args), capture_output=True, text=True, timeout=60)


def with_offset(zk, group: str, topic: str, offset: int) -> None:
    """A group with a committed offset, as a coordinator writes it."""
    zk.create(layout.offset_path(group, topic, 0), encode_offset(offset), makepath=True)


def test_the_broker_is_refused_as_too_old_and_no_retry_helps(old_kafka):
    assert old_kafka.version.startswith("0.10.")
    with pytest.raises(BrokerTooOld, match=TOO_OLD.replace(".", r"\.")) as refused:
        BrokerConnection(old_kafka.bootstrap, timeout_s=10)
    assert not refused.value.retriable


def test_a_server_given_a_kafka_too_old_says_so_and_stops(old_kafka, cluster):
    done = subprocess.run(zkcoord_command("server", "--id", "9", "--zookeeper", cluster.zookeeper,
                                          "--no-broker", "--kafka-bootstrap", old_kafka.bootstrap),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert f"Kafka at {old_kafka.bootstrap}: broker {old_kafka.bootstrap} {TOO_OLD}" in done.stderr, done.stderr


def test_a_thin_consumer_of_a_kafka_too_old_stops_with_that_error(old_kafka, cluster):
    topic = "aged"
    old_kafka.create_topic(topic, partitions=1, replication_factor=1)
    consumer = cluster.add_consumer("aged-readers", topics=[topic])
    # It is assigned the partition, and its fetcher meets the broker: the
    # consumer stops with the reason instead of waiting for records forever.
    wait_until(lambda: not consumer.alive, 60, message="the consumer to stop")
    assert consumer.returncode != 0
    assert f"zkcoord: error: broker {old_kafka.bootstrap} {TOO_OLD}" in consumer.log_tail()


def test_groups_describe_says_the_kafka_is_too_old_instead_of_showing_no_lag(old_kafka, cluster):
    group, topic = "aged-lag", "aged-lag"
    old_kafka.create_topic(topic, partitions=1, replication_factor=1)
    with_offset(cluster.zk, group, topic, 0)
    done = zkcoord_cli("groups", "describe", "--zookeeper", cluster.zookeeper, "--group", group)
    assert done.returncode == 1
    assert f"zkcoord groups: broker {old_kafka.bootstrap} {TOO_OLD}" in done.stderr, done.stderr
    assert zkcoord_cli("groups", "describe", "--zookeeper", cluster.zookeeper, "--group", group,
                       "--no-lag").returncode == 0


def test_groups_describe_of_a_kafka_not_reachable_shows_the_offsets_and_says_why_there_is_no_lag(cluster):
    group, unreachable = "unreached", "127.0.0.1:1"
    with_offset(cluster.zk, group, "far-away", 7)
    done = zkcoord_cli("groups", "describe", "--zookeeper", cluster.zookeeper, "--group", group,
                       "--kafka-bootstrap", unreachable)
    assert done.returncode == 0, done.stderr
    assert "far-away" in done.stdout and " 7 " in done.stdout
    assert (f"no lag for 1 of 1 partition(s): no broker reachable: cannot connect to broker {unreachable}"
            in done.stderr), done.stderr
