"""The invariants, checked from outside a running group: what the demo, the
tests and the drill's liveness waits agree a whole group is."""

from __future__ import annotations

from typing import Iterable, Sequence

from zkcoord.errors import UnknownPartitionError
from zkcoord.records import TopicPartition
from zkcoord.testing.cluster import ConsumerProcess
from zkcoord.testing.process import ClusterError


class OwnershipViolation(ClusterError):
    """Two live members hold the same partition at once (invariant 1 broken)."""


def partitions_of(zk, topics: Iterable[str]) -> set[TopicPartition]:
    """Every partition of ``topics``, as ZooKeeper's topic nodes say now."""
    from zkcoord.zk.nodes import read_topic

    result = set()
    for topic in topics:
        node = read_topic(zk, topic)
        if node is None:
            raise UnknownPartitionError(f"topic {topic!r} does not exist")
        result |= {(topic, p) for p in node.assignment.partitions}
    return result


def group_is_whole(zk, group: str, consumers: Sequence[ConsumerProcess], partitions: set,
                   every_member_holds: bool = False) -> bool:
    """Exclusive and complete, seen from outside: the reachable members'
    status files partition ``partitions`` exactly, every reachable member is
    registered (and holds something, if asked), and ZooKeeper's owners say the
    same. Paused members and members cut off the network do not count (their
    files are frozen or about to change). Raises OwnershipViolation if two
    reachable members hold one partition."""
    from zkcoord.zk.nodes import read_owners

    held: dict[TopicPartition, str] = {}
    for consumer in (c for c in consumers if c.reachable):
        status = consumer.status()
        if not status or not status["registered"] or (every_member_holds and not status["assignment"]):
            return False
        for topic, partition in status["assignment"]:
            if (topic, partition) in held:
                raise OwnershipViolation(f"{topic}-{partition} held by {held[(topic, partition)]} "
                                         f"and {status['consumer_id']}")
            held[(topic, partition)] = status["consumer_id"]
    return set(held) == partitions and read_owners(zk, group) == held
