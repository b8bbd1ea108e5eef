"""What the end-to-end tests check of a running group: the invariants, from outside."""

from __future__ import annotations

import time

from confluent_kafka import Producer
from kazoo.client import KazooClient

from zkcoord.admin.groups import read_owners
from zkcoord.localcluster import ConsumerProcess, LocalCluster, group_is_whole  # noqa: F401
from zkcoord.zk import layout


def partitions_of(zk: KazooClient, topics) -> set[tuple[str, int]]:
    result = set()
    for topic in topics:
        data, _ = zk.get(layout.topic_path(topic))
        result |= {(topic, p) for p in layout.decode_topic(topic, data).partitions}
    return result


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
            raise AssertionError(f"group {group} not whole after {timeout}s: owners {read_owners(zk, group)}, "
                                 f"members {statuses}")
        time.sleep(0.1)
    return time.monotonic() - started
