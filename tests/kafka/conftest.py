"""Real Apache Kafka clusters, one per test module (a cluster takes 10 to 15
seconds to start on two cores): Kafka 3.9 in ZooKeeper mode on the shared
ensemble, in a chroot of its own that the tests read as zkcoord does, and
Kafka 4 in KRaft mode. Their jars come from ``scripts/install.sh kafka``."""

from __future__ import annotations

from typing import Iterator

import pytest

from zkcoord.testing import fresh_chroot
from zkcoord.testing.kafka import KRAFT_MODE, ZOOKEEPER_MODE, KafkaCluster, KafkaSettings


@pytest.fixture(scope="module")
def kafka_chroot(zk_ensemble) -> Iterator[tuple]:
    """(connect string, kazoo client) of a chroot that a ZooKeeper-mode Kafka
    cluster and zkcoord share."""
    with fresh_chroot(zk_ensemble.connect_string, prefix="kafka") as chroot:
        yield chroot


@pytest.fixture(scope="module")
def zookeeper_kafka(kafka_chroot, tmp_path_factory) -> Iterator[KafkaCluster]:
    with KafkaCluster(tmp_path_factory.mktemp("kafka-zk"), KafkaSettings(ZOOKEEPER_MODE),
                      zookeeper=kafka_chroot[0]) as cluster:
        yield cluster.start()


@pytest.fixture(scope="module")
def kraft_kafka(tmp_path_factory) -> Iterator[KafkaCluster]:
    with KafkaCluster(tmp_path_factory.mktemp("kafka-kraft"), KafkaSettings(KRAFT_MODE)) as cluster:
        yield cluster.start()
