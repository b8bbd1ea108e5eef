"""What a Kafka cluster says of itself in a Metadata answer: its brokers, its
topics with their ids, partitions and leaders.

Where Kafka keeps no registrations in zkcoord's ZooKeeper (KRaft), this is
how the coordinator, the admin commands and the Spark source learn the
brokers and the topics. :class:`ClusterMetadata` is a plain value built from
kafka-python's MetadataResponse, or read from the answer's bytes
(metadata_scan.py) with the MetadataResponse decoded only if asked for;
:func:`ask_any` asks the brokers of a bootstrap list one after the other
until one answers.
"""

from __future__ import annotations

import uuid
from typing import Any, Callable, Iterable, NamedTuple, Optional

from zkcoord.errors import ZkcoordError
from zkcoord.fetch.metadata_scan import ScanError, scan
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
        return cls._made(brokers, ((t.error_code, t.name, topic_id_of(t),
                                    ((p.error_code, p.partition_index, p.leader_id) for p in t.partitions))
                                   for t in response.topics), response, raw)

    @classmethod
    def read(cls, raw: bytes, version: int, decode: Callable[[], Any]) -> "ClusterMetadata":
        """The value of the Metadata answer whose body is ``raw``, of
        ``version``; ``decode()`` gives kafka-python's MetadataResponse of
        it. A flexible version's answer is scanned (metadata_scan.py), and
        ``response`` decoded only when first read; an older one is decoded."""
        try:
            scanned = scan(raw, version)
        except ScanError:
            return cls.of(decode(), raw)
        brokers = {node: f"{host}:{port}" for node, (host, port) in scanned.brokers.items()}
        return cls._made(brokers, ((t.error_code, t.name, kafka_uuid(t.topic_id) if t.topic_id and any(t.topic_id)
                                    else None, t.partitions) for t in scanned.topics), DecodedWhenRead(decode), raw)

    @classmethod
    def _made(cls, brokers: dict[int, str], topics: Iterable, response, raw: bytes) -> "ClusterMetadata":
        """From each topic's (error code, name, topic id, partitions), each
        partition's (error code, index, leader id)."""
        known = {}
        refused = set()
        for error_code, name, topic_id, partitions in topics:
            if error_code == TOPIC_AUTHORIZATION_FAILED:
                refused.add(name)
            if error_code != NONE or name is None:
                continue  # unknown, not authorized, being deleted: nothing more to say of it
            known[name] = TopicMetadata(topic_id, {index: brokers.get(leader) if error == NONE else None
                                                   for error, index, leader in partitions})
        return cls(brokers, known, frozenset(refused), response, raw)

    def leaders(self) -> dict[tuple[str, int], Optional[str]]:
        """Every partition known, with its leader's address."""
        return {(topic, partition): leader for topic, data in self.topics.items()
                for partition, leader in data.leaders.items()}


class DecodedWhenRead:
    """kafka-python's MetadataResponse of an answer, decoded by ``decode()``
    when one of its attributes is first read: a gateway repeats the whole
    answer to its clients, a coordinator's watch never reads it."""

    def __init__(self, decode: Callable[[], Any]):
        self._decode = decode
        self._response = None

    def __getattr__(self, name: str):
        if self._response is None:
            self._response = self._decode()
        return getattr(self._response, name)


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
