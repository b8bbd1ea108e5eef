"""What the Spark driver learns about the cluster: topics, partitions and
their leaders from ZooKeeper (Kafka's layout) or, beside a KRaft Kafka,
from Kafka's Metadata; offset bounds from the brokers; committed group
offsets and coordinator servers from ZooKeeper.

A :class:`ClusterView` opens its ZooKeeper session and broker connections on first
use and never travels: Spark pickles readers to executors, and executors get
only plain values (topic, partition, range, broker address) from the plan.
"""

from __future__ import annotations

import logging
import threading
from typing import Iterable, Optional

from zkcoord.errors import UnknownPartitionError
from zkcoord.fetch.isolation import READ_UNCOMMITTED
from zkcoord.records import TopicPartition
from zkcoord.security.config import PLAIN, TlsConfig
from zkcoord.spark.errors import NoLeaderError, SparkSourceError
from zkcoord.spark.offsets import PartitionOffsets
from zkcoord.spark.options import SaslOptions, SourceOptions, login
from zkcoord.zk import layout
from zkcoord.zk.chroots import missing_topic
from zkcoord.zk.nodes import read_topic, topic_names
from zkcoord.zk.security import ZkSecurity

log = logging.getLogger(__name__)

ZK_TIMEOUT_S = 15.0
KAFKA_TIMEOUT_S = 15.0


class ClusterView:
    def __init__(self, zookeeper: str, *, tls: TlsConfig = PLAIN, security: Optional[ZkSecurity] = None,
                 sasl: Optional[SaslOptions] = None, isolation_level: str = READ_UNCOMMITTED,
                 kafka_bootstrap: tuple[str, ...] = ()):
        """``tls``: how to reach the brokers (plaintext by default); ``security``:
        ZooKeeper's credentials and TLS; ``sasl``: the brokers' (None: anonymous);
        ``isolation_level``: read_committed takes the last stable offset for
        a partition's latest (:meth:`bounds`); ``kafka_bootstrap``: Kafka
        brokers to ask for topics, partitions and leaders (empty: read them
        from ZooKeeper, where Kafka registers them)."""
        self.zookeeper = zookeeper
        self.kafka_bootstrap = tuple(kafka_bootstrap)
        self.tls = tls
        self.sasl = sasl
        self.isolation_level = isolation_level
        self._tls_context = None
        self._login = None  # the last login read, for the refusals' words
        self.security = security or ZkSecurity()
        self._zk = None
        self._brokers: dict[str, object] = {}  # address -> BrokerConnection, for offset bounds
        self._lock = threading.Lock()
        self._brokers_lock = threading.Lock()

    # Never pickled: a reader that holds a view sends only its connect string
    # and settings (file names, never a password).
    def __getstate__(self):
        return {"zookeeper": self.zookeeper, "tls": self.tls, "security": self.security, "sasl": self.sasl,
                "isolation_level": self.isolation_level, "kafka_bootstrap": self.kafka_bootstrap}

    def __setstate__(self, state):
        self.__init__(state["zookeeper"], tls=state.get("tls", PLAIN), security=state.get("security"),
                      sasl=state.get("sasl"), isolation_level=state.get("isolation_level", READ_UNCOMMITTED),
                      kafka_bootstrap=state.get("kafka_bootstrap", ()))

    @property
    def zk(self):
        with self._lock:
            if self._zk is None:
                from zkcoord.errors import ZkcoordError
                from zkcoord.zk import client as zk_client

                try:
                    client = zk_client.open_client(self.zookeeper, self.security)
                except ZkcoordError as exc:
                    raise SparkSourceError(f"ZooKeeper settings: {exc}") from None
                try:
                    zk_client.start(client, timeout=ZK_TIMEOUT_S)
                except Exception as exc:
                    client.close()
                    raise SparkSourceError(f"cannot reach ZooKeeper at {self.zookeeper}: {exc}") from None
                self._zk = client
            return self._zk

    def close(self) -> None:
        with self._lock:
            for address in list(self._brokers):
                self._drop_broker(address)
            if self._zk is not None:
                self._zk.stop()
                self._zk.close()
                self._zk = None

    # -- ZooKeeper -----------------------------------------------------------------------

    def topics(self, options: SourceOptions) -> list[str]:
        """Subscribed topics that exist now."""
        if self.kafka_bootstrap:
            # Topics named are asked by name: one refused says so (every topic's
            # answer leaves out, silently, those the principal may not see).
            answer = self._kafka(options.topics or None)
            self._refuse(answer)
            return sorted(t for t in answer.topics if options.matches(t))
        return [t for t in topic_names(self.zk) if options.matches(t)]

    def partitions(self, topics: Iterable[str]) -> list[TopicPartition]:
        if self.kafka_bootstrap:
            answer = self._kafka(topics)
            self._refuse(answer)
            return [(topic, p) for topic in topics if topic in answer.topics
                    for p in sorted(answer.topics[topic].leaders)]
        result = []
        for topic in topics:
            node = read_topic(self.zk, topic)
            if node is not None:  # else deleted since it was listed
                result.extend((topic, p) for p in sorted(node.assignment.partitions))
        return result

    def brokers(self) -> dict[int, str]:
        """Live broker id -> "host:port" of its listener speaking what the source speaks."""
        from zkcoord.zk import layout
        from zkcoord.zk.nodes import read_brokers

        if self.kafka_bootstrap:
            return self._kafka(()).brokers
        found = {}
        protocol = layout.client_protocol(self.tls.speaks, self.sasl is not None)
        for broker_id, registration in read_brokers(self.zk).items():
            host, port = registration.address_for(protocol)
            found[broker_id] = f"{host or '127.0.0.1'}:{port}"
        return found

    def leaders(self, partitions: Iterable[TopicPartition], *,
                skip_unavailable: bool = False) -> dict[TopicPartition, str]:
        """Where each partition is read: its leader's address. With
        ``skip_unavailable``, a partition without a live leader (or gone) is left out."""
        from kazoo.exceptions import NoNodeError

        if self.kafka_bootstrap:
            return self._kafka_leaders(list(partitions), skip_unavailable)
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
                    node = read_topic(self.zk, topic)
                    if node is None:
                        if skip_unavailable:
                            continue
                        raise UnknownPartitionError(missing_topic(self.zk, topic)) from None
                    assignments[topic] = node.assignment
                replicas = assignments[topic].partitions.get(partition)
                if replicas is None:
                    if skip_unavailable:
                        continue
                    raise UnknownPartitionError(f"topic {topic!r} has no partition {partition}") from None
                leader = next((r for r in replicas if r in live), None)
            if leader not in live:
                if skip_unavailable:
                    continue
                raise NoLeaderError(f"{topic}-{partition}: no live leader (broker {leader})")
            result[(topic, partition)] = live[leader]
        return result

    def _kafka(self, topics: Optional[Iterable[str]] = None):
        """Kafka's Metadata (of ``topics``; None: every topic), from the first bootstrap broker that answers."""
        from zkcoord.errors import ZkcoordError
        from zkcoord.fetch.cluster import ask_any
        from zkcoord.spark.login import open_broker

        credential = login(self.sasl)
        try:
            return ask_any(self.kafka_bootstrap, lambda address: open_broker(
                address, credential, client_id="zkcoord-spark-planner", timeout_s=KAFKA_TIMEOUT_S,
                tls=self._tls()), topics)
        except ZkcoordError as exc:
            raise SparkSourceError(f"Kafka at {','.join(self.kafka_bootstrap)}: {exc}") from None

    def _refuse(self, answer) -> None:
        """TopicAuthorizationError for the first topic Kafka would not describe to the source."""
        from zkcoord.spark.login import topic_refused

        for topic in sorted(answer.refused):
            raise topic_refused(topic, topic, self.sasl, "Describe", f"Kafka at {','.join(self.kafka_bootstrap)}")

    def _kafka_leaders(self, partitions: list[TopicPartition], skip_unavailable: bool) -> dict[TopicPartition, str]:
        answer = self._kafka({topic for topic, _ in partitions})
        self._refuse(answer)
        known = answer.topics
        result = {}
        for topic, partition in partitions:
            leaders = known[topic].leaders if topic in known else None
            if leaders is None or partition not in leaders:
                if skip_unavailable:
                    continue
                raise UnknownPartitionError(f"topic {topic!r} does not exist" if leaders is None
                                            else f"topic {topic!r} has no partition {partition}")
            if leaders[partition] is None:
                if skip_unavailable:
                    continue
                raise NoLeaderError(f"{topic}-{partition}: no live leader")
            result[(topic, partition)] = leaders[partition]
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
        from zkcoord.fetch.connection import (
            EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, BrokerConnectionError, PartitionError,
        )
        from zkcoord.spark.login import refusal

        partitions = list(partitions)
        result = {}
        with self._brokers_lock:
            leaders = self.leaders(partitions, skip_unavailable=True)
            for tp in partitions:
                for attempt in (1, 2):
                    if attempt == 2:  # the leader may have moved
                        leaders.update(self.leaders([tp], skip_unavailable=True))
                    leader = leaders.get(tp)
                    try:
                        if leader is None:
                            raise NoLeaderError(f"{tp[0]}-{tp[1]}: no live leader")
                        connection = self._broker(leader)
                        result[tp] = (connection.list_offset(tp[0], tp[1], EARLIEST_TIMESTAMP),
                                      connection.list_offset(tp[0], tp[1], LATEST_TIMESTAMP))
                        break
                    except (BrokerConnectionError, PartitionError, NoLeaderError) as exc:
                        refused = isinstance(exc, PartitionError) and refusal(exc, *tp, self._login, "Describe",
                                                                              leader)
                        if refused:
                            raise refused from None
                        if leader is not None:
                            self._drop_broker(leader)
                        if attempt == 2 and not skip_unavailable:
                            raise NoLeaderError(f"{tp[0]}-{tp[1]}: cannot list offsets: {exc}") from None
        return result

    def _broker(self, address: str):
        connection = self._brokers.get(address)
        if connection is None:
            from zkcoord.spark.login import open_broker

            self._login = login(self.sasl)  # read afresh: a password file may have changed
            connection = self._brokers[address] = open_broker(address, self._login, client_id="zkcoord-spark-planner",
                                                              timeout_s=KAFKA_TIMEOUT_S, tls=self._tls(),
                                                              isolation_level=self.isolation_level)
        return connection

    def _tls(self):
        """The brokers' client SSLContext (None: plaintext), made once."""
        from zkcoord.security.tls import client_context

        if self._tls_context is None and self.tls.speaks:
            self._tls_context = client_context(self.tls)
        return self._tls_context

    def _drop_broker(self, address: str) -> None:
        connection = self._brokers.pop(address, None)
        if connection is not None:
            connection.close()
