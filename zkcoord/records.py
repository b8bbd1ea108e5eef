"""The plain values every part of zkcoord shares: a partition's identity, where
its log ends, and the record a consumer hands to the application, whatever fetched it."""

from typing import NamedTuple, Optional


class TopicPartition(NamedTuple):
    """One partition of one topic. A tuple: ``topic, partition = tp`` works,
    and it equals (and hashes as) the plain ``(topic, partition)``, so either
    form finds the same dict entry. The coordinator protocol carries it as
    an array entry (wire/messages.py)."""

    topic: str
    partition: int


class LogEnd(NamedTuple):
    """Where a partition's log ends, as its leader said: the offset the next
    record will get, and the leader's epoch (-1: a broker that does not say,
    ListOffsets before version 4). Within a topic and an epoch, a log only grows."""

    offset: int
    leader_epoch: int = -1


class Record(NamedTuple):
    """One consumed message. ``offset`` is the record's own offset; the next
    offset to consume from its partition is ``offset + 1``."""

    topic: str
    partition: int
    offset: int
    key: Optional[bytes]
    value: Optional[bytes]
    timestamp: int  # milliseconds since the epoch, as the producer or broker set it
