"""What a Kafka cluster says of itself in a Metadata answer: its brokers, its
topics with their ids, partitions and leaders.

Where Kafka keeps no registrations in zkcoord's ZooKeeper (KRaft), this is
how the coordinator, the admin commands and the Spark source learn the
brokers and the topics. :class:`ClusterMetadata` is a plain value built from
kafka-python's MetadataResponse; :func:`ask_any` asks the brokers of a
bootstrap list one after the other until one answers.
"""

from __future__ import annotations

import uuid
from typing import Any, Callable, Iterable, NamedTuple, Optional

from zkcoord.errors import ZkcoordError
from zkcoord.zk.layout.kafka import kafka_uuid

NONE = 0
TOPIC_AUTHORIZATION_FAILED = 29
ZERO_UUID = uuid.UUID(int=0)


class KafkaUnreachable(ZkcoordError):
    """No broker of the bootstrap list answered Metadata. Retriable: the
    brokers may come back; the message says what each one did."""

    retriable = True


def topic_id_of(topic) -> Optional[str]:
    """The Uuid text form of a Metadata answer's topic (kafka-python's), or
    None when the answer has none (Metadata before 10, or the zero Uuid)."""
    raw_id = getattr(topic, "topic_id", None)
    return kafka_uuid(raw_id.bytes) if isinstance(raw_id, uuid.UUID) and raw_id != ZERO_UUID else None


class TopicMetadata(NamedTuple):
    topic_id: Optional[str]  # Kafka's Uuid text form; None when the broker gives none (Metadata before 10)
    leaders: dict[int, Optional[str]]  # partition -> its leader's address (None: no leader now)

    @property
    def partition_count(self) -> int:
        """Partitions 0 to n - 1: a partition missing from the answer is counted all the same."""
        return max(self.leaders, default=-1) + 1


class ClusterMetadata(NamedTuple):
    brokers: dict[int, str]  # node id -> "host:port"
    topics: dict[str, TopicMetadata]  # only topics answered without a topic-level error
    # Topics named in the request that the broker would not describe to this
    # client's principal (TOPIC_AUTHORIZATION_FAILED): an ACL is missing. A
    # request for every topic leaves them out without a word, as Kafka does.
    refused: frozenset[str] = frozenset()
    # The kafka-python MetadataResponse itself: leaders' epochs, replicas and
    # ISRs, for a group gateway that names Kafka's leaders to its clients.
    response: Any = None
    # The answer's body as the broker sent it: a later answer that is the
    # same need not be decoded (BrokerConnection.cluster).
    raw: bytes = b""

    @classmethod
    def of(cls, response, raw: bytes = b"") -> "ClusterMetadata":
        """The value of a kafka-python MetadataResponse (any version), whose body was ``raw``."""
        brokers = {b.node_id: f"{b.host}:{b.port}" for b in response.brokers}
        topics = {}
        refused = set()
        for topic in response.topics:
            if topic.error_code == TOPIC_AUTHORIZATION_FAILED:
                refused.add(topic.name)
            if topic.error_code != NONE or topic.name is None:
                continue  # unknown, not authorized, being deleted: nothing more to say of it
            topics[topic.name] = TopicMetadata(topic_id_of(topic), {
                p.partition_index: brokers.get(p.leader_id) if p.error_code == NONE else None
                for p in topic.partitions})
        return cls(brokers, topics, frozenset(refused), response, raw)

    def leaders(self) -> dict[tuple[str, int], Optional[str]]:
        """Every partition known, with its leader's address."""
        return {(topic, partition): leader for topic, data in self.topics.items()
                for partition, leader in data.leaders.items()}


def ask_any(addresses: Iterable[str], connect: Callable[[str], object],
            topics: Optional[Iterable[str]] = None, previous: Optional[ClusterMetadata] = None) -> ClusterMetadata:
    """The Metadata of the first of ``addresses`` that answers, connected
    with ``connect`` (address -> a BrokerConnection, closed after); raises
    KafkaUnreachable naming what each did, or the error of a broker that
    refused us for good (too old, credentials refused). ``previous`` itself
    if the answer is the same as it (BrokerConnection.cluster)."""
    failures = []
    for address in addresses:
        try:
            with connect(address) as connection:
                return connection.cluster(topics, previous)
        except ZkcoordError as exc:
            if not getattr(exc, "retriable", True):
                raise
            failures.append(str(exc))
    raise KafkaUnreachable("no Kafka broker answers Metadata: " + ("; ".join(failures) or "none to ask"))
