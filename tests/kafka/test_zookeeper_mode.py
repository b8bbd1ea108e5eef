"""Kafka 3.9 in ZooKeeper mode, three brokers on our ensemble, in a chroot
zkcoord shares: the harness's replication checks, and Kafka's own /brokers
nodes read with zkcoord's codecs (zkcoord.zk.layout); and zkcoord given
another chroot than Kafka's, told where Kafka's topics are."""

from __future__ import annotations

import json
import subprocess

import pytest
from confluent_kafka import TopicCollection

from tests.kafka.replication import ReplicationChecks
from zkcoord.testing import fresh_chroot, wait_until
from zkcoord.testing.process import zkcoord_command
from zkcoord.zk.layout import broker_path, partition_state_path, topic_path
from zkcoord.zk.layout.kafka import decode_broker, decode_partition_state, decode_topic, kafka_uuid

pytestmark = pytest.mark.kafka


@pytest.fixture
def kafka(zookeeper_kafka):
    return zookeeper_kafka


@pytest.fixture
def zk(kafka_chroot):
    """A kazoo client on the chroot the brokers registered under."""
    return kafka_chroot[1]


class TestZookeeperCluster(ReplicationChecks):
    pass


def topic_id_text(uuid) -> str:
    """confluent_kafka's Uuid in Kafka's text form, the one its ZooKeeper nodes hold."""
    raw = (uuid.get_most_significant_bits().to_bytes(8, "big", signed=True)
           + uuid.get_least_significant_bits().to_bytes(8, "big", signed=True))
    return kafka_uuid(raw)


def test_broker_registrations_are_in_the_shared_chroot(kafka, zk):
    assert kafka.version.startswith("3.9.")
    for node_id, broker in kafka.brokers.items():
        registration = decode_broker(node_id, zk.get(broker_path(node_id))[0])
        assert registration.plaintext_address() == ("127.0.0.1", broker.node_ports.port)


def test_topic_nodes_written_by_kafka_decode_with_zkcoords_reader(kafka, zk):
    topic = "shared-tree"
    kafka.create_topic(topic, partitions=3, replication_factor=3)
    data = zk.get(topic_path(topic))[0]
    assert {"topic_id", "adding_replicas", "removing_replicas"} <= json.loads(data).keys()

    # What zkcoord reads in ZooKeeper against what Kafka answers over its own protocol.
    assignment = decode_topic(topic, data)
    admin = kafka.new_admin()
    described = admin.describe_topics(TopicCollection([topic]))[topic].result(30)
    assert assignment.version == 3
    assert assignment.topic_id == topic_id_text(described.topic_id)
    assert assignment.partitions == {p.id: tuple(r.id for r in p.replicas) for p in described.partitions}
    kafka.wait_for_isr(topic, 0, {1, 2, 3})
    for partition in described.partitions:
        state = decode_partition_state(zk.get(partition_state_path(topic, partition.id))[0])
        assert state.leader == partition.leader.id

    kafka.add_partitions(topic, 5)
    grown = wait_until(lambda: (lambda a: a if len(a.partitions) == 5 else None)(
        decode_topic(topic, zk.get(topic_path(topic))[0])), 30, message=f"{topic} grown to 5 in ZooKeeper")
    assert grown.topic_id == assignment.topic_id
    assert {p: grown.partitions[p] for p in range(3)} == assignment.partitions


def test_a_topic_kafka_registered_under_another_chroot_is_an_error_naming_that_chroot(kafka, kafka_chroot,
                                                                                      zk_ensemble):
    # zkcoord given a chroot of its own, not Kafka's: the topic is Kafka's all
    # the same, and the user is told where it is and what to change.
    topic = "elsewhere"
    kafka.create_topic(topic, partitions=1, replication_factor=3)
    kafkas = "/" + kafka_chroot[0].partition("/")[2]
    with fresh_chroot(zk_ensemble.connect_string, prefix="zkcoord-apart") as (apart, _client):
        done = subprocess.run(zkcoord_command("topics", "describe", "--zookeeper", apart, "--topic", topic),
                              capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert (f"topic {topic!r} is not registered under zkcoord's ZooKeeper chroot /{apart.partition('/')[2]}, but "
            f"Kafka registered it under {kafkas}: zkcoord's --zookeeper and Kafka's zookeeper.connect must name the "
            f"same chroot") in done.stderr, done.stderr
    assert f"here --zookeeper {zk_ensemble.connect_string}{kafkas}" in done.stderr


def test_a_topic_in_no_chroot_where_no_broker_is_registered_says_the_chroots_likely_differ(zk_ensemble):
    with fresh_chroot(zk_ensemble.connect_string, prefix="zkcoord-alone") as (alone, _client):
        done = subprocess.run(zkcoord_command("topics", "describe", "--zookeeper", alone, "--topic", "nowhere"),
                              capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "topic 'nowhere' does not exist under zkcoord's ZooKeeper chroot" in done.stderr, done.stderr
    assert "where no Kafka broker is registered either: zkcoord's --zookeeper and Kafka's zookeeper.connect" \
           in done.stderr
