"""What the end-to-end tests check of a running group: the invariants, from outside."""

from __future__ import annotations

import time

from confluent_kafka import Producer
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from zkcoord.localcluster import ConsumerProcess, LocalCluster
from zkcoord.zk import layout


def partitions_of(zk: KazooClient, topics) -> set[tuple[str, int]]:
    result = set()
    for topic in topics:
        data, _ = zk.get(layout.topic_path(topic))
        result |= {(topic, p) for p in layout.decode_topic(topic, data).partitions}
    return result


def _per_partition(zk: KazooClient, parent, leaf, decode) -> dict[tuple[str, int], object]:
    """Decode every ``leaf(topic, partition)`` node under ``parent(topic)``."""
    result = {}
    try:
        topics = zk.get_children(parent(None))
    except NoNodeError:
        return result
    for topic in topics:
        for partition in zk.get_children(parent(topic)):
            data, _ = zk.get(leaf(topic, int(partition)))
            result[(topic, int(partition))] = decode(data)
    return result


def zk_owners(zk: KazooClient, group: str) -> dict[tuple[str, int], str]:
    return _per_partition(zk, lambda t: layout.owners_path(group, t),
                          lambda t, p: layout.owner_path(group, t, p), layout.decode_owner)


def zk_offsets(zk: KazooClient, group: str) -> dict[tuple[str, int], int]:
    return _per_partition(zk, lambda t: layout.offsets_path(group, t),
                          lambda t, p: layout.offset_path(group, t, p), layout.decode_offset)


def group_is_whole(zk: KazooClient, group: str, consumers: list[ConsumerProcess], partitions: set) -> bool:
    """Exclusive and complete: the live members' assignments partition ``partitions``
    exactly, every live member is registered, and ZooKeeper's owners say the same."""
    live = [c for c in consumers if c.alive]
    held: dict[tuple[str, int], str] = {}
    for consumer in live:
        status = consumer.status()
        if not status or not status["registered"]:
            return False
        for topic, partition in status["assignment"]:
            if (topic, partition) in held:
                raise AssertionError(f"{topic}-{partition} held by {held[(topic, partition)]} "
                                     f"and {status['consumer_id']}")
            held[(topic, partition)] = status["consumer_id"]
    return set(held) == partitions and zk_owners(zk, group) == held


def produce(cluster: LocalCluster, topic: str, count: int, start: int = 0, partitions: int | None = None) -> None:
    producer = Producer({"bootstrap.servers": cluster.brokers, "linger.ms": 5})
    for n in range(start, start + count):
        kwargs = {"partition": n % partitions} if partitions else {}
        producer.produce(topic, value=f"m-{n}".encode(), **kwargs)
        if n % 1000 == 0:
            producer.poll(0)
    left = producer.flush(30)
    assert left == 0, f"{left} messages not acknowledged"


def delivered_values(consumers: list[ConsumerProcess]) -> list[str]:
    return [r["value"] for c in consumers for r in c.records()]


def wait_whole(zk, group, consumers, partitions, timeout: float) -> float:
    """Seconds until the group is whole; fails after ``timeout``."""
    started = time.monotonic()
    deadline = started + timeout
    while not group_is_whole(zk, group, consumers, partitions):
        if time.monotonic() > deadline:
            statuses = {c.name: c.status() for c in consumers if c.alive}
            raise AssertionError(f"group {group} not whole after {timeout}s: owners {zk_owners(zk, group)}, "
                                 f"members {statuses}")
        time.sleep(0.1)
    return time.monotonic() - started
