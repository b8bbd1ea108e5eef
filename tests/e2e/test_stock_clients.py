"""Stock Kafka clients as members of zkcoord groups, through the broker's
group APIs (broker/groups/): real servers, real ZooKeeper, real clients.

Each test checks what a user of that client sees (records, each once;
rebalances; committed offsets) and what the coordinator recorded (owners in
ZooKeeper, offsets in Kafka 0.8's layout).
"""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest
from confluent_kafka import Consumer as KafkaConsumer

from tests.e2e.checks import produce
from zkcoord.testing.waiting import wait_until
from zkcoord.zk.nodes import read_offsets, read_owners

TOPIC = "events"
PARTITIONS = 4


class ConfluentMember:
    """A confluent-kafka consumer in a group, polled on its own thread,
    keeping every value it delivered and every (re)assignment it saw."""

    def __init__(self, brokers: str, group: str, **settings):
        config = {"bootstrap.servers": brokers, "group.id": group, "auto.offset.reset": "earliest",
                  "session.timeout.ms": 6000, "heartbeat.interval.ms": 500, "enable.auto.commit": True,
                  "auto.commit.interval.ms": 200, "topic.metadata.refresh.interval.ms": 1000, **settings}
        self.consumer = KafkaConsumer(config)
        self.values: list[str] = []
        self.assigned: set = set()
        self.errors: list = []
        self._stop = threading.Event()
        self.consumer.subscribe([TOPIC], on_assign=self._on_assign, on_revoke=self._on_revoke)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _on_assign(self, consumer, partitions):
        self.assigned |= {(p.topic, p.partition) for p in partitions}

    def _on_revoke(self, consumer, partitions):
        self.assigned -= {(p.topic, p.partition) for p in partitions}

    def _run(self):
        while not self._stop.is_set():
            message = self.consumer.poll(0.1)
            if message is None:
                continue
            if message.error():
                self.errors.append(message.error())
                continue
            self.values.append(message.value().decode())

    def close(self):
        self._stop.set()
        self._thread.join(10)
        self.consumer.close()


@pytest.fixture
def group_cluster(cluster_factory):
    cluster = cluster_factory(1)
    cluster.create_topic(TOPIC, PARTITIONS)
    return cluster


def _whole(zk, group, members) -> bool:
    owners = read_owners(zk, group)
    held = [tp for m in members for tp in m.assigned]
    return len(owners) == PARTITIONS and sorted(held) == sorted(owners) and len(set(held)) == len(held)


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_confluent_consumers_share_a_group_and_deliver_each_record_once(group_cluster, strategy):
    cluster = group_cluster
    produce(cluster, TOPIC, 400, partitions=PARTITIONS)
    first = ConfluentMember(cluster.broker_list, "g", **{"partition.assignment.strategy": strategy})
    members = [first]
    try:
        wait_until(lambda: len(first.values) == 400 and _whole(cluster.zk, "g", members), timeout=30)
        second = ConfluentMember(cluster.broker_list, "g", **{"partition.assignment.strategy": strategy})
        members.append(second)
        wait_until(lambda: second.assigned and _whole(cluster.zk, "g", members), timeout=30)
        produce(cluster, TOPIC, 400, start=400, partitions=PARTITIONS)
        wait_until(lambda: len(first.values) + len(second.values) >= 800, timeout=30)
        time.sleep(0.5)  # any duplicate would arrive right behind
        delivered = Counter(first.values + second.values)
        assert sorted(delivered) == sorted(f"m-{n}" for n in range(800))
        assert [v for v, n in delivered.items() if n > 1] == []
        assert not first.errors and not second.errors
        # The second leaves cleanly: the first takes everything over, from its commits.
        second.close()
        members.remove(second)
        wait_until(lambda: _whole(cluster.zk, "g", members) and len(first.assigned) == PARTITIONS, timeout=30)
        produce(cluster, TOPIC, 200, start=800, partitions=PARTITIONS)
        wait_until(lambda: len(first.values) + len(second.values) >= 1000, timeout=30)
        time.sleep(0.5)
        delivered = Counter(first.values + second.values)
        assert [v for v, n in delivered.items() if n > 1] == []
        assert len(delivered) == 1000
        wait_until(lambda: sum(read_offsets(cluster.zk, "g").values()) == 1000, timeout=15)
    finally:
        for member in members:
            member.close()
