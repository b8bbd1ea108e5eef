"""The reference Java client (Kafka 4's ``KafkaConsumer``) as a member of
zkcoord groups, through the embedded broker's group APIs: classic eager
(range), cooperative-sticky, static membership and KIP-848's consumer
protocol, beside thin consumers and a librdkafka member. Real ZooKeeper,
real servers, Kafka's own client (zkcoord.testing.java_members).

Each scenario checks each record's offset was consumed exactly once across
joins and clean leaves, and that the offsets committed end at the log's end;
a member the group refuses sees an exception in its application.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Iterator

import pytest

from tests.e2e.conftest import SERVER_ARGS
from zkcoord.testing import LocalCluster, fresh_chroot, wait_until
from zkcoord.testing.java_members import JavaMembers
from zkcoord.zk.nodes import read_offsets, read_owners

PARTITIONS = 4
# KIP-848's heartbeat interval and session timeout are the broker's to set: short, for quick tests.
SERVER = (*SERVER_ARGS, "--group-consumer-heartbeat-interval-ms", "500", "--group-consumer-session-timeout-ms", "6000")
CLASSIC = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500}


@pytest.fixture(scope="module")
def cluster(zk_ensemble, tmp_path_factory) -> Iterator[LocalCluster]:
    """One server with its broker for the module; each test its own topic and group."""
    with fresh_chroot(zk_ensemble.connect_string, "java") as (connect, _client), \
            LocalCluster(connect, tmp_path_factory.mktemp("java-client"), SERVER) as zkc:
        zkc.start_servers(1)
        yield zkc


@pytest.fixture
def java(cluster, tmp_path) -> Iterator:
    """Starts Java members in the test's directory; stops them when it ends."""
    started: list[JavaMembers] = []

    def start(topic: str, group: str, members: int = 1, **properties) -> JavaMembers:
        driver = JavaMembers(tmp_path / f"java-{len(started)}", [topic], {
            "bootstrap.servers": cluster.broker_list, "group.id": group, "auto.offset.reset": "earliest",
            **properties}, members=members)
        started.append(driver)
        return driver.start()

    yield start
    for driver in started:
        driver.stop()


def produce(cluster: LocalCluster, topic: str, count: int, start: int = 0) -> None:
    cluster.produce(topic, ((n % PARTITIONS, None, f"m-{n}".encode()) for n in range(start, start + count)))


def test_a_java_consumer_joins_consumes_and_commits(cluster, java):
    cluster.create_topic("solo", PARTITIONS)
    produce(cluster, "solo", 200)
    member = java("solo", "solo", **CLASSIC, **{"partition.assignment.strategy":
                                               "org.apache.kafka.clients.consumer.RangeAssignor"})
    member.wait_for(lambda: len(member.records()) >= 200, 30, "200 records")
    assert member.errors() == []
    counts = Counter(member.records())
    assert set(counts.values()) == {1} and len(counts) == 200
    wait_until(lambda: sum(read_offsets(cluster.zk, "solo").values()) == 200, timeout=15)
    assert len(read_owners(cluster.zk, "solo")) == PARTITIONS
