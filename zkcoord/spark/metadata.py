"""What the Spark driver learns about the cluster: topics, partitions and
their leaders from ZooKeeper (Kafka's layout), offset bounds from the
brokers, committed group offsets and coordinator servers from ZooKeeper.

A :class:`ClusterView` opens its ZooKeeper session and Kafka client on first
use and never travels: Spark pickles readers to executors, and executors get
only plain values (topic, partition, range, broker address) from the plan.
"""

from __future__ import annotations

import logging
import threading
from typing import Iterable, Optional

from zkcoord.records import TopicPartition
from zkcoord.spark.errors import NoLeaderError, SparkSourceError, UnknownPartitionError
from zkcoord.spark.offsets import PartitionOffsets
from zkcoord.spark.options import SourceOptions
from zkcoord.zk import layout

log = logging.getLogger(__name__)

ZK_TIMEOUT_S = 15.0
KAFKA_TIMEOUT_S = 15.0


class ClusterView:
    def __init__(self, zookeeper: str):
        self.zookeeper = zookeeper
        self._zk = None
        self._kafka = None
        self._kafka_bootstrap: Optional[str] = None
        self._lock = threading.Lock()

    # Never pickled: a reader that holds a view sends only its connect string.
    def __getstate__(self):
        return {"zookeeper": self.zookeeper}

    def __setstate__(self, state):
        self.__init__(state["zookeeper"])

    @property
    def zk(self):
        with self._lock:
            if self._zk is None:
                from kazoo.client import KazooClient

                client = KazooClient(hosts=self.zookeeper)
                try:
                    client.start(timeout=ZK_TIMEOUT_S)
                except Exception as exc:
                    raise SparkSourceError(f"cannot reach ZooKeeper at {self.zookeeper}: {exc}") from None
                self._zk = client
            return self._zk

    def close(self) -> None:
        with self._lock:
            if self._kafka is not None:
                self._kafka.close()
                self._kafka = None
            if self._zk is not None:
                self._zk.stop()
                self._zk.close()
                self._zk = None

    # -- ZooKeeper -----------------------------------------------------------------------

    def topics(self, options: SourceOptions) -> list[str]:
        """Subscribed topics that exist now."""
        if self.zk.exists(layout.BROKER_TOPICS) is None:
            return []
        return sorted(t for t in self.zk.get_children(layout.BROKER_TOPICS) if options.matches(t))

    def partitions(self, topics: Iterable[str]) -> list[TopicPartition]:
        from kazoo.exceptions import NoNodeError

        result = []
        for topic in topics:
            try:
                data, _ = self.zk.get(layout.topic_path(topic))
            except NoNodeError:
                continue  # deleted since it was listed
            result.extend((topic, p) for p in sorted(layout.decode_topic(topic, data).partitions))
        return result

    def brokers(self) -> dict[int, str]:
        """Live broker id -> "host:port" of its PLAINTEXT listener."""
        from zkcoord.zk.nodes import read_brokers

        found = {}
        for broker_id, registration in read_brokers(self.zk).items():
            host, port = registration.plaintext_address()
            found[broker_id] = f"{host or '127.0.0.1'}:{port}"
        return found

    def leaders(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, str]:
        """Where each partition is read: its leader's address."""
        from kazoo.exceptions import NoNodeError

        live = self.brokers()
        assignments: dict[str, layout.TopicAssignment] = {}
        result = {}
        for topic, partition in partitions:
            leader = None
            try:
                data, _ = self.zk.get(layout.partition_state_path(topic, partition))
                leader = layout.decode_partition_state(data).leader
            except NoNodeError:
                if topic not in assignments:
                    try:
                        data, _ = self.zk.get(layout.topic_path(topic))
                    except NoNodeError:
                        raise UnknownPartitionError(f"topic {topic!r} does not exist") from None
                    assignments[topic] = layout.decode_topic(topic, data)
                replicas = assignments[topic].partitions.get(partition)
                if replicas is None:
                    raise UnknownPartitionError(f"topic {topic!r} has no partition {partition}") from None
                leader = next((r for r in replicas if r in live), None)
            if leader not in live:
                raise NoLeaderError(f"{topic}-{partition}: no live leader (broker {leader})")
            result[(topic, partition)] = live[leader]
        return result

    def committed(self, group: str, partitions: Iterable[TopicPartition]) -> PartitionOffsets:
        """The group's committed offsets (Kafka 0.8 nodes); absent ones left out."""
        from zkcoord.zk.nodes import read_offsets

        return read_offsets(self.zk, group, partitions)

    def servers(self) -> list[str]:
        """Coordinator-protocol endpoints of the live zkcoord servers."""
        from zkcoord.zk.nodes import read_servers

        return [f"{info.host}:{info.port}" for info in read_servers(self.zk).values()]

    # -- brokers -------------------------------------------------------------------------

    def bounds(self, partitions: Iterable[TopicPartition], *,
               skip_unavailable: bool = False) -> dict[TopicPartition, tuple[int, int]]:
        """(earliest, latest) offset of each partition, asked of its leader.
        With ``skip_unavailable``, partitions without an answer (just created,
        no leader yet) are left out instead of failing the call."""
        from confluent_kafka import KafkaException, TopicPartition as KafkaTP

        partitions = list(partitions)
        result = {}
        for topic, partition in partitions:
            for attempt in (1, 2):
                consumer = self._kafka_client(fresh=attempt == 2)
                try:
                    result[(topic, partition)] = consumer.get_watermark_offsets(
                        KafkaTP(topic, partition), timeout=KAFKA_TIMEOUT_S, cached=False)
                    break
                except KafkaException as exc:
                    # The client's metadata may predate the partition: ask again afresh.
                    if attempt == 2 and not skip_unavailable:
                        raise NoLeaderError(f"{topic}-{partition}: cannot list offsets: {exc}") from None
        return result

    def _kafka_client(self, fresh: bool = False):
        bootstrap = ",".join(sorted(self.brokers().values()))
        if not bootstrap:
            raise NoLeaderError("no live brokers under /brokers/ids")
        with self._lock:
            if fresh or self._kafka is None or bootstrap != self._kafka_bootstrap:
                from confluent_kafka import Consumer

                if self._kafka is not None:
                    self._kafka.close()
                self._kafka = Consumer({
                    "bootstrap.servers": bootstrap, "group.id": "zkcoord-spark-metadata",
                    "enable.auto.commit": False, "log_level": 3,
                })
                self._kafka_bootstrap = bootstrap
            return self._kafka
