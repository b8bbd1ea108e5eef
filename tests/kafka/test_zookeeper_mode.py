"""Kafka 3.9 in ZooKeeper mode, three brokers on our ensemble, in a chroot
zkcoord shares: the harness's replication checks, and Kafka's own /brokers
nodes read with zkcoord's codecs (zkcoord.zk.layout)."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import TopicCollection

from tests.kafka.replication import ReplicationChecks
from zkcoord.testing import wait_until
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
